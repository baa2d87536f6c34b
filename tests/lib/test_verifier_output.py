"""The one reader of verifier output: rewards, JUnit XML and CTRF, each case where validation and
Harbor job import used to disagree, and untrusted XML refused before it is expanded."""
from __future__ import annotations

import json

import pytest

from facet_site.lib.verifier_output import (ResultsParseError, TestCase, parse_ctrf_json, parse_junit_xml,
                                            parse_report, read_reward, read_verifier_output)

# ---- rewards ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("logs,expected", [
    ({"reward.txt": b"1\n"}, 1.0),
    ({"reward.txt": b" 0.25 "}, 0.25),
    ({"reward.json": b'{"reward": 0.5, "accuracy": 0.9}'}, 0.5),
    ({"reward.json": b'{"reward": 0.5}', "reward.txt": b"1"}, 0.5),  # json first (current Harbor)
    ({"reward.json": b'{"accuracy": 0.9}', "reward.txt": b"1"}, 1.0),  # txt merged in as "reward"
    ({"reward.json": b'{"accuracy": 0.9}'}, 0.9),  # the only metric
    ({"reward.json": b'{"a": 0.9, "b": 0.1}'}, None),
    ({"reward.json": b'{"reward": true}'}, None),  # booleans are dropped
    ({"reward.json": b"[1]", "reward.txt": b"0"}, 0.0),
    ({"reward.txt": b""}, None),
    ({"reward.txt": b"passed"}, None),
    ({"reward.txt": b"nan"}, None),
    # Harbor reads exactly /logs/verifier/reward.txt: a reward file in a sub-directory is not one
    ({"verifier/reward.txt": b"0"}, None),
    ({}, None),
])
def test_reward(logs, expected):
    assert read_verifier_output(logs).reward == expected


def test_a_single_metric_without_a_reward_key_is_the_reward_and_passes():
    # Validation used to call this "no reward" (fail); Harbor's metrics take the one value.
    out = read_reward(None, b'{"accuracy": 1}')
    assert (out.reward, out.rewards, out.problem) == (1.0, {"accuracy": 1.0}, "")


def test_all_numeric_metrics_are_kept():
    out = read_reward(b"0", b'{"reward": 0.5, "acc": 1, "ok": true, "name": "x"}')
    assert (out.reward, out.rewards) == (0.5, {"reward": 0.5, "acc": 1.0})
    assert out.txt_disagrees == 0.0


@pytest.mark.parametrize("txt,json_,problem", [
    (b"", None, "reward.txt is empty"),
    (b"passed", None, "reward.txt is not a number: 'passed'"),
    (None, None, "the verifier wrote neither /logs/verifier/reward.txt nor reward.json"),
    (None, b'{"a": 1, "b": 0}', 'reward.json has 2 metrics and no "reward" among them'),
    (None, b'{"name": "x"}', "reward.json has no numeric metric"),
])
def test_no_reward_says_why(txt, json_, problem):
    out = read_reward(txt, json_)
    assert out.reward is None and out.problem == problem


# ---- JUnit XML --------------------------------------------------------------------------------------

JUNIT = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.test_state" name="test_ok" time="0.01"/>
<testcase classname="tests.test_state" name="test_bad"><failure message="assert 1 == 2">trace</failure></testcase>
<testcase classname="tests.test_state" name="test_boom"><error message="fixture error"/></testcase>
<testcase name="test_skip"><skipped message="no gpu"/></testcase>
</testsuite></testsuites>"""

CTRF = {"results": {"tool": {"name": "pytest"}, "summary": {"tests": 3},
                    "tests": [{"name": "test_outputs.py::test_a", "status": "passed", "duration": 1},
                              {"name": "test_outputs.py::test_b", "status": "failed", "message": "AssertionError"},
                              {"name": "test_outputs.py::test_c", "status": "pending"}]}}


def test_junit_cases():
    assert parse_junit_xml(JUNIT) == [
        TestCase("tests.test_state::test_ok", "passed", "", 0.01),
        TestCase("tests.test_state::test_bad", "failed", "assert 1 == 2"),
        TestCase("tests.test_state::test_boom", "error", "fixture error"),
        TestCase("test_skip", "skipped", "no gpu"),
    ]


@pytest.mark.parametrize("children", [
    '<skipped message="later"/><failure message="boom"/>',
    '<failure message="boom"/><skipped message="later"/>',
])
def test_failure_outranks_skipped_in_either_order(children):
    data = f'<testsuite><testcase name="t">{children}</testcase></testsuite>'.encode()
    assert parse_junit_xml(data) == [TestCase("t", "failed", "boom")]


BOMB = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>
<testsuite><testcase name="&lol3;"/></testsuite>"""

XXE = b"""<?xml version="1.0"?><!DOCTYPE t [<!ENTITY x SYSTEM "file:///etc/passwd">]><testsuite><testcase name="&x;"/></testsuite>"""

# A plain internal entity in UTF-16: no "<!ENTITY" bytes for a byte search to find.
UTF16_ENTITY = ('<?xml version="1.0" encoding="utf-16"?><!DOCTYPE t [<!ENTITY secret "expanded">]>'
                '<testsuite><testcase name="&secret;"/></testsuite>').encode("utf-16")


def test_a_utf16_report_with_an_internal_entity_is_refused_not_expanded():
    assert b"<!ENTITY" not in UTF16_ENTITY and b"<!entity" not in UTF16_ENTITY.lower()
    with pytest.raises(ResultsParseError) as err:
        parse_junit_xml(UTF16_ENTITY, "junit.xml")
    assert err.value.file == "junit.xml" and "DOCTYPE/entity declarations are not allowed" in err.value.message
    out = read_verifier_output({"junit.xml": UTF16_ENTITY, "reward.txt": b"1"})
    assert out.tests == [] and out.tests_source is None
    assert [(e.file, "DOCTYPE" in e.message) for e in out.report_errors] == [("junit.xml", True)]


@pytest.mark.parametrize("data,fragment", [
    (b"<testsuite><testcase name='a'></testsuite>", "malformed XML"),
    (b"", "malformed XML"),
    (b"<html><body/></html>", "not a JUnit report"),
    (BOMB, "DOCTYPE"),
    (XXE, "DOCTYPE"),
    (BOMB.decode().replace('<?xml version="1.0"?>', '<?xml version="1.0" encoding="utf-16"?>').encode("utf-16"),
     "DOCTYPE"),
    (b"<testsuite><testcase name='&undefined;'/></testsuite>", "malformed XML"),
])
def test_junit_rejects_malformed_and_entity_expansion(data, fragment):
    with pytest.raises(ResultsParseError) as err:
        parse_report("verifier/junit.xml", data)
    assert err.value.file == "verifier/junit.xml" and fragment in str(err.value)


# ---- CTRF -------------------------------------------------------------------------------------------


def test_ctrf_cases():
    assert parse_ctrf_json(json.dumps(CTRF).encode()) == [
        TestCase("test_outputs.py::test_a", "passed", "", 0.001),
        TestCase("test_outputs.py::test_b", "failed", "AssertionError"),
        TestCase("test_outputs.py::test_c", "skipped", ""),
    ]


def test_ctrf_other_stays_other():
    # Harbor does not interpret CTRF; "other" is CTRF's own status, not an error.
    data = json.dumps({"results": {"tests": [{"name": "t", "status": "other"},
                                             {"name": "u", "status": "flaky"}]}}).encode()
    assert [(t.name, t.outcome) for t in parse_ctrf_json(data)] == [("t", "other"), ("u", "other")]


@pytest.mark.parametrize("data", [b"{not json", b'{"results": {"tests": "nope"}}',
                                  b'{"results": {"tests": [{"name": 1}]}}'])
def test_ctrf_rejects_malformed(data):
    with pytest.raises(ResultsParseError, match="ctrf.json"):
        parse_report("ctrf.json", data)


# ---- one verifier directory -------------------------------------------------------------------------


def test_junit_is_read_before_ctrf_and_other_files_are_not_reports():
    files = {"ctrf.json": json.dumps(CTRF).encode(), "junit.xml": JUNIT, "reward.json": b'{"reward": 1}',
             "other.json": b"[]", "test-stdout.txt": b"4 passed"}
    out = read_verifier_output(files)
    assert out.reward == 1.0 and out.tests_source == "junit.xml" and len(out.tests) == 4
    assert out.test_dicts[0] == {"name": "tests.test_state::test_ok", "outcome": "passed", "message": "",
                                 "seconds": 0.01}
    assert parse_report("other.json", b"[]") is None and parse_report("reward.json", b"{}") is None
    assert parse_report("test-stdout.txt", b"x") is None


def test_an_unreadable_report_is_named_and_the_next_one_is_used():
    out = read_verifier_output({"junit.xml": BOMB, "ctrf.json": json.dumps(CTRF).encode()})
    assert out.tests_source == "ctrf.json" and len(out.tests) == 3
    assert [e.file for e in out.report_errors] == ["junit.xml"]
