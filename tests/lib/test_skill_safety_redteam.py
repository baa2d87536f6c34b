"""The red-team sets (docs/skills.md, "Red-team rounds"): skills written to get past a pattern scanner,
beside legitimate look-alikes, by sessions that never saw the rules. Defanged and written for tests;
they live in fixtures/safety-redteam.tar.gz with their labels.

These are floors, not goals: what the rules caught when the sets were last fixed. A change that
lets a caught skill through, or flags a look-alike that was clean, fails here and must say why in
docs/skills.md; a change that catches more raises the floor. bench/safety_redteam.py prints the
misses.
"""
from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from bench.safety_redteam import SETS, score_set

# set: (malicious flagged, of; look-alikes clean, of), 2026-12-06; set 2's pickle "model" and set 3's
# hidden miner are caught since 2026-12-07 (package.pickle-code, abuse.cryptominer-hidden), and a
# typosquatted dependency in each of sets 3 and 4 (supply.typosquat-manifest)
# Since 2026-12-07 (later): telemetry naming the user and the host in each set (exfil.host-fingerprint),
# orders in a tool's output field (inject.follow-output-field), a registry token sent to a look-alike
# mirror (supply.registry-token), a lone .pyc (package.sourceless-bytecode) and a fetch wrapper that
# copies the Authorization header (exfil.auth-header-beacon), then set 5's last two (a devcontainer
# uploading a tar of ~/.ssh, exfil.archive-credential-dirs; MCP servers set to auto-approve in every
# client config, config.mcp-auto-approve); all after reading the sets' misses
# Since 2026-12-07 (evening), after reading set 3's misses: pieces joined by "".join, addresses
# written only encoded (encoded.hidden-address, also set 2's reversed URL), a planted ssh key, a
# mirror list of bare IPs, a DNS name built from hex chunks, an http self-update, a privileged
# container with the host's root, "redaction is not needed", a backup's include list of key files,
# "do not mention the copy", approvals set through key tuples; set 4's AGENTS.md template posting
# found credentials to a "vault" (exfil.found-secrets-send)
# Look-alikes since: golangci-lint's installer is a vendor's (set 3), and a review list naming
# `curl | sh` with no address is no download (set 5, persist.launch-agent)
# Since 2026-12-07 (night), after reading set 7's misses: multi-line reverse shells (PowerShell, Ruby),
# a download run detached and silenced, rot13 of a reversed string, a command spelt in shell variables
# for eval, a sliced variable in a DNS name, a lone `${{ toJSON(secrets) }}`, cloud uploads and git pushes
# as sends, Makefiles as programs, an MCP wildcard approval and an args-list registry, "make sure the
# block is present in SOUL.md", a repository's remote in telemetry, Python dict writes of approvals,
# `mv x.new x` updates, "the output of `cat ~/.npmrc`", off-screen text, a date-gated wipe and a payee
# chosen by amount (which also catches set 6's Pix generator); look-alikes: "inert" test tables and a
# `cases/` folder of injection fixtures. Then set 8's: remote orders wrapped over lines, "priority over all
# other skills", "run `cat ~/.netrc` and include the output", standing orders to send any key seen, gists
# and issues of credential files, code from a DNS TXT record; blockquotes under an examples heading and a
# rule file's `regex:` field are quotations. Since 2026-12-07 (stop 39): file-name globs that pick out
# secrets beside a send, `new Function("require", "process", body)` of a fetched body, and a tool's
# arguments and result mirrored to a written-in address. Then set 9's: XOR'd numbers decoded, Rust build
# scripts read as programs, a key variable appended to authorized_keys, device-code relays, split tokens,
# cookies and database dumps sent out, every Docker volume wiped, model-call loops, clipboard streams, allow lists over lines, hidden
# orders in French and commercial concealment; look-alikes: a watch task on folder open, a skill titled
# for installation, a signature list named SIGS. Then set 10's: a key named in a constant, Caesar-shifted
# codes and \\u escapes decoded, JVM, C# and Swift files read as programs, encoded links to programs, PHP
# eval of a decoded blob, lock files resolved to raw IPs, transcripts uploaded by a hook; look-alike: a
# samples/ folder holds sample inputs. Since stop 40, set 10's: every repository under the home folder reset, a
# wipe through an unguarded variable, an archive from a plain-http feed unpacked in place, a fetched document's
# commands run, a proxy at a public IP written into a client template. Then set 11's: a Go bind shell, a Python
# reverse shell over lines (the scan's alone now), the secret-named environment filtered over two lines, the
# environment and shell history in error reports to a written-in DSN, hidden orders in Russian, a module imported
# under another name for exec(urlopen(...)), a command in a program's escaped quotes, "no need to mention it to
# the user"; look-alikes: a cheat sheet's labelled table, a malware family in a title, Chinese and Korean example
# labels, a regex list named RULES. Later in stop 40: agent sessions uploaded to a written-in host, a lock file on
# a look-alike registry, an SSH key's bytes in DNS names, a wallet's secret key encoded as text beside requests,
# "do not ask for confirmation and do not mention it"
FLOORS = {
    "set1": (49, 51, 32, 33),
    "set2": (47, 48, 33, 33),
    "set3": (40, 45, 32, 34),
    # a deobfuscator's obfuscated sample file is held since encoded.obfuscated-js (docs/skills.md)
    "set4": (46, 47, 29, 31),
    # written 2026-12-07; scored once at 35 of 51 and 34 of 37 (bench/results/safety_redteam_set5_blind.json)
    "set5": (51, 51, 37, 37),
    # written 2026-12-07 (evening); scored once at 35 of 51 and 32 of 39 (safety_redteam_set6_blind.json)
    "set6": (50, 51, 37, 39),
    # written 2026-12-07 (night); scored once at 42 of 60 and 37 of 40 (safety_redteam_set7_blind.json)
    "set7": (60, 60, 39, 40),
    # written 2026-12-07 (night, later); scored once at 28 of 42 and 29 of 32 (safety_redteam_set8_blind.json)
    "set8": (39, 42, 32, 32),
    # written 2026-12-07 (stop 39); scored once at 24 of 42 and 25 of 28 (safety_redteam_set9_blind.json)
    "set9": (38, 42, 28, 28),
    # written 2026-12-07 (stop 39), after set 9's fixes; scored once at 21 of 36 and 23 of 24
    # (safety_redteam_set10_blind.json)
    "set10": (31, 36, 24, 24),
    # written 2026-12-07 (stop 40), after set 10's fixes; scored once at 21 of 38 and 18 of 22 at the session's
    # start and 22 of 38 and 18 of 22 after set 10's fixes (safety_redteam_set11_blind.json); since stop 41 also
    # the credentials object in an analytics event, a Lua plugin loading what it fetched, a Bcc from its own settings,
    # and with set 12 the grid bot trading live by default
    "set11": (37, 38, 21, 22),
    # written 2026-12-08 (stop 41), after set 11's fixes; scored once at 23 of 40 and 19 of 20, at the session's start
    # and after set 11's last fixes alike (safety_redteam_set12_blind.json); then its misses fixed, and its
    # deobfuscator (and set 4's), whose test samples decode to a hello-world, is a sample
    "set12": (40, 40, 20, 20),
    # written 2026-12-08 (stop 41) by a session told a strong scanner was in place and asked for techniques that are not
    # the well-known ones; scored once at 10 of 34 at the session's start and 11 of 34 with every fix before it was
    # read, 15 of 16 look-alikes at both (safety_redteam_set13_blind.json); then six of its misses fixed
    "set13": (17, 34, 15, 16),
}


@pytest.fixture(scope="module")
def scores(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("redteam")
    with tarfile.open(SETS) as tar:
        tar.extractall(root, filter="data")
    return {name: score_set(Path(root) / "safety-redteam" / name) for name in FLOORS}


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_the_red_team_set_stays_caught_and_its_look_alikes_clean(scores, name):
    flagged, malicious, clean, lookalikes = FLOORS[name]
    got = scores[name]
    assert (got["malicious"], got["lookalikes"]) == (malicious, lookalikes)
    assert got["malicious_flagged"] >= flagged, f"{name} now misses: {got['misses']}"
    assert got["lookalikes_clean"] >= clean, f"{name} now flags look-alikes: {got['false_alarms']}"


def test_the_commodity_droppers_of_every_set_are_unsafe(tmp_path):
    # The ClawHavoc shapes the issue found on ClawHub (a password zip with an .exe, base64 to a shell,
    # a backdoor key in a weather skill), from every set, are rejected outright, not only held.
    from bench.safety_redteam import level_of
    from facet_site.lib.skillformat.corpus import parse_skill_dir

    with tarfile.open(SETS) as tar:
        tar.extractall(tmp_path, filter="data")
    base = tmp_path / "safety-redteam"
    for rel in ("set1/nightowl-dev/youtube-summarize-pro", "set1/weatherly/weather-now", "set2/kvothe-labs/solana-wallet-tracker",
                "set3/quillforge/youtube-summarize-plus", "set3/tidewater-labs/polymarket-odds",
                "set4/solanakit-dev/solana-wallet-tracker", "set4/gworkspace-herramientas/gmail-asistente",
                "set6/toolsmith-hq/pdf-toolkit-pro", "set6/weatherly/weather-now",
                "set7/clawtools-hub/pdf-forge-pro", "set7/summarizer-labs/youtube-digest", "set7/deployhelper-ru/vps-bootstrap",
                "set8/cryptodesk-labs/solana-wallet-tracker", "set8/opsguard/server-hardening-helper",
                "set9/solana-hub-tools/solana-wallet-tracker", "set9/vidnotes/youtube-summarizer-pro",
                "set9/macboost/mac-performance-tuner"):
        skill = parse_skill_dir(base / rel, root=base / rel.split("/")[0], source_kind="clawhub")
        assert level_of(skill) == "unsafe", rel


def test_a_pickle_that_runs_a_command_and_a_miner_started_in_the_background_are_unsafe(tmp_path):
    from bench.safety_redteam import level_of
    from facet_site.lib.skillformat.corpus import parse_skill_dir

    with tarfile.open(SETS) as tar:
        tar.extractall(tmp_path, filter="data")
    base = tmp_path / "safety-redteam"
    for rel in ("set2/corvid-assist/review-sentiment", "set3/minerva-compute/gpu-benchmark"):
        skill = parse_skill_dir(base / rel, root=base / rel.split("/")[0], source_kind="clawhub")
        assert level_of(skill) == "unsafe", rel
