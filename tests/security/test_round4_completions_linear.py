"""Round four, finding 5: one completions line's top-logprobs are checked in linear time.

A line listing K tokens used to test each token against every earlier one (K^2/2 comparisons:
10k -> 40k entries cost 18x the CPU time). Time is not asserted here (tests never fail on time);
the work is counted instead: tokens are a str subclass that counts its equality tests.
"""

from __future__ import annotations

from ikdata.sampling.completions import parse_line


class _Counted(str):
    """A token string that counts how often it is compared for equality."""

    calls = 0

    def __eq__(self, other):
        type(self).calls += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def _comparisons(k: int) -> int:
    listed = [{"token": _Counted(f"t{i}"), "logprob": -1.0 - i / k} for i in range(k)]
    record = {"settings": {"temperature": 1.0}, "top_logprobs": listed, "draws": [{"seed": 0, "token": "t0"}]}
    _Counted.calls = 0
    position, problems = parse_line(record, path="c.jsonl", line=1)
    assert problems == [] and position is not None and len(position.tokens) == k
    return _Counted.calls


def test_comparisons_grow_linearly_with_the_listed_tokens():
    small, large = _comparisons(1000), _comparisons(4000)
    assert large <= 4 * max(small, 1000) + 1000, (small, large)  # quadratic: ~500k vs ~8M


def test_a_token_listed_twice_is_still_named():
    record = {"settings": {"temperature": 1.0}, "draws": [{"seed": 0, "token": "a"}],
              "top_logprobs": [{"token": "a", "logprob": -1.0}, {"token": "b", "logprob": -2.0},
                               {"token": "token_id:3", "logprob": -3.0}, {"token": 3, "logprob": -4.0},
                               {"token": "a", "logprob": -5.0}]}
    position, problems = parse_line(record, path="c.jsonl", line=7)
    assert position is None
    named = sorted((p.pointer, p.line) for p in problems)
    assert named == [("/top_logprobs/3/token", 7), ("/top_logprobs/4/token", 7)]
    assert all("listed twice" in p.message for p in problems)
