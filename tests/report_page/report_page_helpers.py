"""A replay report like a real one of 100 cases: diffusion trajectories, operator workloads, a sampling group."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path


def _trajectory(failing: bool) -> dict:
    steps = []
    for stream in ("video", "audio"):
        for i in range(20):
            e = 0.0 if i == 0 else 2e-7 * (i + 1)
            bad = failing and stream == "video" and i == 7
            steps.append({"index": i, "stream": stream, "e": 5e-4 if bad else e, "f": 1e-6, "bound": 4e-6 + 1e-9,
                          "cos": 0.9999, "chain": 1e-7, "chain_bound": 1e-5, "passed": not bad})
    return {"k": 4.0, "eps": 1e-9, "level": "step", "steps": steps, "steps_passed": 39 if failing else 40,
            "steps_total": 40, "attention": {"reference": "sdpa", "alt": "sdpa-reversed"},
            "worst": {"ratio": 500.0 if failing else 0.8, "step": 7, "stream": "video"},
            **({"first_failure": {"step": 7, "streams": ["video"], "check": "e"}} if failing else {}),
            "decode": {"psnr_db": [31.0 - 0.1 * f for f in range(9)], "psnr_mean_db": 30.6, "psnr_worst_db": 30.2,
                       "worst_frame": 8, "thresholds": {"psnr_mean_db": 25.0, "psnr_worst_db": 20.0}}}


def report_of_100_cases() -> dict:
    """3 trajectories (1 failing), 91 operator cases over 23 definitions (3 failing), 1 error, 5 sampling draws."""
    cases = []
    for t in range(3):
        failing = t == 1
        cases.append({"definition": "trajectory:LTX2Pipeline", "uuid": f"{t:02d}" + "ab" * 16, "status":
                      "failed" if failing else "passed", **({"reason": "step 7 (video): e 5e-04 > 4·f + 1e-09"}
                                                           if failing else {}), "trajectory": _trajectory(failing)})
    for n in range(92):
        definition = f"dense_gemm_bias_f32_nt_n{384 * (1 + n % 23)}_k384"
        ratio = 10.0 ** (-12 + (n % 12)) if n % 30 != 7 else 3.5
        status = "failed" if ratio > 1 else "passed"
        case = {"definition": definition, "uuid": f"op{n:04d}" + "c" * 24, "status": status,
                "metrics": {"C": {"max_abs_error": ratio * 1e-5, "max_error_ratio": ratio}}}
        if status == "failed":
            case["reason"] = f"C: max abs error {ratio * 1e-5:.2e} past atol"
        cases.append(case)
    cases[-1] = {"definition": "rmsnorm_f32_h384", "uuid": "err0" + "d" * 28, "status": "error",
                 "reason": "the reference raised: RuntimeError: shapes do not match"}
    for i in range(5):
        cases.append({"definition": "sampling_top_k_f32_v32000", "uuid": f"s{i}" + "e" * 30, "status": "passed",
                      "tolerance": {"samples": {"judge": "sampling"}}, "metrics": {"samples": {}},
                      "sampling": {"positions": 10, "judged": 10, "outside": 0,
                                   "pit": {"n": 10, "histogram": [1] * 10}}})
    sampling = [{"definition": "sampling_top_k_f32_v32000", "alpha": 0.01, "verdict": "passed",
                 "tests": [{"test": "pit", "n": 50, "p_value": 0.41, "alpha": 0.01, "null": "uniform",
                            "too_small": False, "histogram": [5] * 10}]}]
    return {"format": "ikdata-replay-report", "torch": "2.13.0", "device": "cpu", "ikdata_version": "0",
            "tolerances": {}, "cases": cases, "sampling": sampling}


class Page(HTMLParser):
    """Element ids, links, tables, and the scripts of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.scripts: list[str] = []
        self.sources: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a":
            self.links.append(attrs.get("href"))
        if tag == "script":
            self._in_script = True
            self.scripts.append("")
            if attrs.get("src"):
                self.sources.append(attrs["src"])

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def browser() -> str | None:
    for name in ("chromium", "chromium-browser", "chromium-headless", "headless_shell", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def open_in_browser(page: Path, profile: Path) -> subprocess.CompletedProcess:
    """The page rendered in headless Chromium: its DOM after the scripts ran (stdout), its console (stderr)."""
    return subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--dump-dom",
                           page.as_uri()], capture_output=True, text=True, timeout=240)
