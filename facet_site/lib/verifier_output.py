"""The one reader of what a Harbor verifier writes to /logs/verifier: reward.txt / reward.json and
the JUnit XML or CTRF JSON test reports. Django-free; validation, rollouts and Harbor job import
all read verifier output through this module.

Decisions, taken the way current Harbor reads the files (docs: harbor-format.md §3.4):

* Rewards. reward.json (an object of metric name to number) is read first; only finite int/float
  values count (booleans and non-finite numbers are dropped). reward.txt (one number) is the
  fallback and fills in "reward" when the JSON lacks it. The trial's reward is the "reward"
  metric, or else the only metric when there is exactly one: Harbor's job metrics take a
  single-key reward dict's one value as the trial's score, so `{"accuracy": 1}` passes. Several
  metrics without "reward" give no reward. Only the top-level files count: Harbor reads exactly
  /logs/verifier/reward.txt and reward.json.
* JUnit XML. A testcase with a <failure> or <error> child failed (or errored) whatever else it
  holds: failure/error outrank a <skipped/> marker in any order.
* CTRF. Harbor itself does not interpret CTRF (the report is informational), so statuses are
  kept as CTRF names them: passed, failed, skipped, and "other" stays "other" rather than being
  counted as an error; CTRF's "pending" is a test that did not run, so it reads as "skipped".
* Untrusted XML. Reports come from code under test. An expat pass that refuses any DOCTYPE,
  entity declaration or external entity reference runs before ElementTree parses the file;
  expat sees the declared encoding (UTF-16 included), which a byte search for "<!ENTITY" does
  not, so a UTF-16 report with an internal entity is refused, never expanded.
* One report is used per trial: the first readable one, JUnit (*.xml) before CTRF (*.json), in
  name order; every unreadable report is named with its reason in `VerifierOutput.report_errors`.
"""
from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
import xml.parsers.expat
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

__all__ = ["MAX_REPORT_BYTES", "ResultsParseError", "TestCase", "VerifierOutput", "finite_number",
           "parse_ctrf_json", "parse_junit_xml", "parse_report", "read_reward", "read_verifier_output",
           "reward_of"]

# Reports can be huge (a runaway test printing into its report); we refuse to parse past this.
MAX_REPORT_BYTES = 50 * 1024 * 1024
MAX_TESTS = 2000
MAX_MESSAGE = 2000

OUTCOMES = ("passed", "failed", "error", "skipped", "other")


class ResultsParseError(ValueError):
    """A verifier report (JUnit XML, CTRF JSON) that is malformed or unsafe. Names the file."""

    def __init__(self, file: str, message: str):
        self.file = file
        self.message = message
        super().__init__(f"{file}: {message}")


@dataclass(frozen=True)
class TestCase:
    """One test of a verifier report."""

    __test__ = False  # not a pytest test class despite the name

    name: str
    outcome: str  # one of OUTCOMES
    message: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class VerifierOutput:
    """Everything read from one /logs/verifier directory."""

    reward: float | None  # None: no readable reward (Harbor's metrics count that as 0)
    rewards: dict[str, float] = field(default_factory=dict)  # every numeric metric
    problem: str = ""  # why there is no reward ("" when there is one)
    tests: list[TestCase] = field(default_factory=list)
    tests_source: str | None = None  # the report the tests came from, e.g. "junit.xml"
    report_errors: list[ResultsParseError] = field(default_factory=list)
    # reward.txt's own value when reward.json also has "reward" and says something else
    txt_disagrees: float | None = None

    @property
    def test_dicts(self) -> list[dict]:
        return [t.to_dict() for t in self.tests]


# --------------------------------------------------------------------------------------------
# Rewards


def finite_number(value: Any) -> float | None:
    """A metric value as Harbor keeps it (int or float, never a boolean), if finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def reward_of(metrics: Mapping[str, float]) -> float | None:
    """The trial's reward among its metrics: "reward", or else the only metric there is."""
    if "reward" in metrics:
        return metrics["reward"]
    return next(iter(metrics.values())) if len(metrics) == 1 else None


def _reward_txt(data: bytes) -> tuple[float | None, str]:
    text = data.decode("utf-8", errors="replace").strip()
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is not None and math.isfinite(value):
        return value, ""
    return None, ("reward.txt is empty" if not text else f"reward.txt is not a number: {text[:80]!r}")


def read_reward(reward_txt: bytes | None, reward_json: bytes | None) -> VerifierOutput:
    """The reward and all numeric metrics from the two reward files (None: file absent)."""
    metrics: dict[str, float] = {}
    problems: list[str] = []
    out = VerifierOutput(reward=None)
    if reward_json is not None:
        try:
            data = json.loads(reward_json.decode("utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            metrics = {str(k): v for k, v0 in data.items() if (v := finite_number(v0)) is not None}
        except (ValueError, UnicodeDecodeError) as exc:
            problems.append(f"reward.json is unreadable ({exc})")
    if reward_txt is not None:
        txt, problem = _reward_txt(reward_txt)
        if "reward" not in metrics:
            if txt is not None:
                metrics["reward"] = txt
            else:
                problems.append(problem)
        elif txt is not None and txt != metrics["reward"]:
            out.txt_disagrees = txt
    reward = reward_of(metrics)
    if reward is None and not problems:
        if metrics:
            problems.append(f"reward.json has {len(metrics)} metrics and no \"reward\" among them")
        elif reward_json is not None:
            problems.append("reward.json has no numeric metric")
        else:
            problems.append("the verifier wrote neither /logs/verifier/reward.txt nor reward.json")
    out.reward, out.rewards = reward, metrics
    out.problem = "" if reward is not None else "; ".join(problems)
    return out


# --------------------------------------------------------------------------------------------
# Test reports


class _Refused(Exception):
    pass


def _safe_xml(data: bytes, file: str) -> ET.Element:
    """Parse XML only if it declares no DOCTYPE: without a DTD there are no entity declarations,
    so neither an expansion bomb nor an external entity can exist."""
    if len(data) > MAX_REPORT_BYTES:
        raise ResultsParseError(file, f"report is over {MAX_REPORT_BYTES} bytes")
    checker = xml.parsers.expat.ParserCreate()

    def refuse(*_args: Any) -> None:
        raise _Refused()

    checker.StartDoctypeDeclHandler = refuse
    checker.EntityDeclHandler = refuse
    checker.ExternalEntityRefHandler = refuse
    try:
        checker.Parse(data, True)
    except _Refused:
        raise ResultsParseError(file, "DOCTYPE/entity declarations are not allowed in reports") from None
    except xml.parsers.expat.ExpatError as exc:
        raise ResultsParseError(file, f"malformed XML: {xml.parsers.expat.ErrorString(exc.code)} "
                                      f"at line {exc.lineno}") from None
    try:
        return ET.fromstring(data)
    except ET.ParseError as exc:
        raise ResultsParseError(file, f"malformed XML: {exc}") from None


_JUNIT_OUTCOME = {"failure": "failed", "error": "error", "skipped": "skipped"}


def parse_junit_xml(data: bytes, file: str = "junit.xml") -> list[TestCase]:
    """Test cases of a JUnit XML report (pytest --junitxml); names are "classname::name"."""
    root = _safe_xml(data, file)
    if root.tag not in ("testsuites", "testsuite", "testcase"):
        raise ResultsParseError(file, f"not a JUnit report (root element <{root.tag}>)")
    cases: list[TestCase] = []
    for tc in root.iter("testcase"):
        if len(cases) >= MAX_TESTS:
            break
        name = tc.get("name") or "?"
        classname = tc.get("classname")
        outcome, message = "passed", ""
        for child in tc:
            if child.tag in _JUNIT_OUTCOME:
                outcome = _JUNIT_OUTCOME[child.tag]
                message = (child.get("message") or child.text or "").strip()
                if outcome != "skipped":
                    break  # failure/error outrank a skip marker, before or after it
        try:
            seconds = float(tc.get("time") or 0)
        except ValueError:
            seconds = 0.0
        cases.append(TestCase(f"{classname}::{name}" if classname else name, outcome,
                              message[:MAX_MESSAGE], seconds if math.isfinite(seconds) else 0.0))
    return cases


_CTRF_OUTCOME = {"passed": "passed", "failed": "failed", "skipped": "skipped", "pending": "skipped",
                 "other": "other"}


def parse_ctrf_json(data: bytes, file: str = "ctrf.json") -> list[TestCase]:
    """Tests of a CTRF report (pytest --ctrf): results.tests[] with name, status, message."""
    if len(data) > MAX_REPORT_BYTES:
        raise ResultsParseError(file, f"report is over {MAX_REPORT_BYTES} bytes")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ResultsParseError(file, f"invalid JSON: {exc}") from None
    results = doc.get("results") if isinstance(doc, dict) else None
    tests = results.get("tests") if isinstance(results, dict) else None
    if not isinstance(tests, list):
        raise ResultsParseError(file, "not a CTRF report (results.tests must be a list)")
    cases = []
    for i, test in enumerate(tests[:MAX_TESTS]):
        if not isinstance(test, dict) or not isinstance(test.get("name"), str) \
                or not isinstance(test.get("status"), str):
            raise ResultsParseError(file, f"results.tests[{i}] needs string name and status")
        # A status outside CTRF's five is not ours to guess at: it reads as "other".
        outcome = _CTRF_OUTCOME.get(test["status"], "other")
        message = str(test.get("message") or test.get("trace") or "")
        duration = finite_number(test.get("duration"))
        cases.append(TestCase(test["name"], outcome, message[:MAX_MESSAGE],
                              duration / 1000 if duration is not None else 0.0))
    return cases


def _is_ctrf_candidate(name: str, data: bytes) -> bool:
    base = name.rsplit("/", 1)[-1].lower()
    return base.startswith("ctrf") or b'"results"' in data[:4096]


def parse_report(name: str, data: bytes) -> list[TestCase] | None:
    """The tests of one file of /logs/verifier, or None when the file is not a report.

    *.xml files are JUnit; *.json files other than reward.json are CTRF when they are named
    ctrf*.json or carry "results" near the top. Raises ResultsParseError naming the file.
    """
    lower = name.lower()
    if lower.endswith(".xml"):
        return parse_junit_xml(data, name)
    base = lower.rsplit("/", 1)[-1]
    if lower.endswith(".json") and base != "reward.json" and _is_ctrf_candidate(name, data):
        return parse_ctrf_json(data, name)
    return None


def read_verifier_output(files: Mapping[str, bytes]) -> VerifierOutput:
    """Read a verifier's output given as {path relative to /logs/verifier: bytes}."""
    out = read_reward(files.get("reward.txt"), files.get("reward.json"))
    # JUnit first (what pytest --junitxml writes), CTRF as the fallback.
    for name in sorted(files, key=lambda n: (not n.lower().endswith(".xml"), n)):
        try:
            tests = parse_report(name, files[name])
        except ResultsParseError as exc:
            out.report_errors.append(exc)
            continue
        if tests is not None:
            out.tests, out.tests_source = tests, name
            break
    return out
