"""Capture's module hook takes torch's own shortcut (module.forward) only where torch would: hooks, global hooks
and tracing still go through nn.Module._call_impl, in steps capture records and in steps it does not."""

from __future__ import annotations

import torch

from ikdata.capture import module_call


def test_the_shortcut_is_taken_only_for_a_call_impl_that_reads_exactly_what_it_tests():
    assert module_call.inlinable(torch.nn.Module._call_impl)  # this torch: the shortcut is taken

    def more_checks(self, *args, **kwargs):  # a torch whose shortcut tests one thing more
        forward_call = self._slow_forward if torch._C._get_tracing_state() else self.forward
        if not (self._backward_hooks or self._backward_pre_hooks or self._forward_hooks or self._forward_pre_hooks
                or _global_backward_pre_hooks or _global_backward_hooks  # noqa: F821
                or _global_forward_hooks or _global_forward_pre_hooks or _global_new_hooks):  # noqa: F821
            return forward_call(*args, **kwargs)

    assert not module_call.inlinable(more_checks)
    assert not module_call.inlinable(lambda self, *args, **kwargs: self.forward(*args, **kwargs))
    assert not module_call.inlinable(len)


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)  # hooks of its own
        self.act = torch.nn.ReLU()  # only the global hook

    def forward(self, x):
        return self.act(self.inner(x)) * 2


def _calls_with_hooks(net: _Net) -> list[str]:
    seen: list[str] = []
    handles = [net.inner.register_forward_pre_hook(lambda m, a: seen.append("pre")),
               net.inner.register_forward_hook(lambda m, a, out: seen.append("post")),
               torch.nn.modules.module.register_module_forward_hook(
                   lambda m, a, out: seen.append(f"global {type(m).__name__}"))]
    try:
        net(torch.randn(2, 4))
    finally:
        for handle in handles:
            handle.remove()
    net(torch.randn(2, 4))  # the hooks removed: the shortcut again, and nothing seen
    return seen


def test_hooks_run_under_capture_in_steps_it_skips_and_steps_it_records(capture_into):
    net = _Net()
    expected = _calls_with_hooks(net)
    assert expected == ["pre", "global Linear", "post", "global ReLU", "global _Net"]  # global hooks run before the module's
    capture_into(steps=(100000,), strict=False)  # no forward is a selected step: the module hook's skip path
    assert _calls_with_hooks(net) == expected
    from ikdata.capture import boot

    boot.uninstall()
    capture_into(strict=False)  # every forward selected: the module stack is kept
    assert _calls_with_hooks(net) == expected
    x = torch.randn(3, 4)
    assert torch.equal(net(x), net.act(net.inner(x)) * 2)
