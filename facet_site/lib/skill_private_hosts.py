"""Private hosts, for the private verdicts (skill_private), Django-free: a host on the user's own network
is one a public task cannot have.

* URLs on private networks (10/8, 172.16/12, 192.168/16, `.internal`, `.local`, `.lan` ...) and loopback
  URLs count; loopback only when the skill does not start the server itself nor tests the user's own web app
  (Playwright, Cypress, a `baseURL`: the app under development), and one on a login redirect or callback line
  is reported as a sign-in (OAuth) instead.
* A device given by address rather than URL (`"ip": "192.168.x.x"`, `--device 10.0.0.7`, `adb connect`),
  and a device the prose says to share a network with ("must be on the same network as Roon Core").
* An address the skill says it turns away (an SSRF test list) is not a host it uses.
"""
from __future__ import annotations

import re

from facet_site.lib import skill_requirements
from facet_site.lib.skill_findings import PRIVATE, Finding, SkillDoc, clip, line_of, program_docs
from facet_site.lib.skillformat import ParsedSkill

_PRIVATE_HOST = re.compile(
    r"https?://(?:[^\s/@]*@)?(?P<host>localhost|127(?:\.\d{1,3}){3}|\[::1\]|10(?:\.\d{1,3}){3}|172\.(?:1[6-9]|2\d|3[01])(?:\.\d{1,3}){2}"
    r"|192\.168(?:\.\d{1,3}){2}|[\w-]+(?:\.[\w-]+)*\.(?:internal|corp|local|lan|intranet|home\.arpa)|intranet(?:\.[\w-]+)*)"
    r"(?![\w-]|\.[\w-])(?::\d+)?",  # "localhost.example.com" is a public name
    re.I,
)
_LOOPBACK = re.compile(r"^(?:localhost|127\.|\[::1\])", re.I)
# A device or server on the user's network given by address, not URL: `"ip": "192.168.x.x"`,
# `export PRINTER_IP=192.168.1.50`, `--device 10.0.0.7`, `adb connect 192.168.1.5:5555`. The address
# may be a placeholder ("x"); a network range (`192.168.1.0/24`) is not a host.
_LAN_OCTET = r"(?:\.(?:\d{1,3}|[xX*]{1,3}))"
_LAN_DEVICE = re.compile(
    r"(?:\b(?:ip|host|address|addr|device|printer|server|[A-Z][A-Z0-9]*_(?:IP|HOST|ADDR(?:ESS)?))[\"']?\s*[:=]\s*[\"']?"
    r"|--(?:ip|host|device|address|addr|printer)[= ]\s*[\"']?|\badb\s+(?:connect|pair)\s+)"
    rf"(?P<host>(?:192\.168{_LAN_OCTET}{{2}}|10{_LAN_OCTET}{{3}}|172\.(?:1[6-9]|2\d|3[01]){_LAN_OCTET}{{2}}))(?![\w.]|/\d)",
    re.I)
# A device the skill reaches on the user's own network, said in prose: "must be on the same network as Roon
# Core", "Must be on same WiFi as the Dyson", "需要与音箱在同一局域网". A need word before it, and no negation.
_SAME_NETWORK = re.compile(
    r"\b(?:must|needs?\s+to|has\s+to|have\s+to|should|ensure|make\s+sure|requires?|required)\b[^.\n]{0,60}?"
    r"\b(?:on|in|to|joined\s+to|connected\s+to)\s+(?:the\s+)?same\s+(?:local\s+)?(?:network|lan|wi-?fi|wlan|subnet)\b"
    r"|(?:需要|必须|须|确保|要求)[^\n。]{0,20}?(?:同一|同一个|相同的?)(?:局域网|网络|内网|Wi-?Fi|WiFi|子网)",
    re.I)
_STARTS_SERVER = re.compile(
    r"\b(?:npm|pnpm|yarn|bun)\s+(?:run\s+)?(?:dev|start|serve|preview)\b|\bpython3?\s+-m\s+http\.server\b|\buvicorn\b|\bgunicorn\b"
    r"|\bflask\s+run\b|\brails\s+s(?:erver)?\b|\bphp\s+-S\b|\bdocker(?:\s+compose|-compose)?\s+(?:run|up)\b|--port\b"
    r"|\bollama\s+serve\b|\bjupyter\b|\bstreamlit\s+run\b|\bnext\s+dev\b|\bvite\b|\bhugo\s+server\b|\bhttp-server\b"
    r"|\bnpx\s+serve\b|\bnode\s+[\w./-]*server\b|\bmanage\.py\s+runserver\b|\blisten\(\s*\d+"
    # the skill's own program in server mode: `python run.py --serve`, `./tool serve --port`
    r"|\b(?:python3?|node|uv\s+run|\./)\s*[\w./-]+\.(?:py|js|mjs|ts)\s+(?:--)?serve\b"
    # a library that starts its own local service: Dask's cluster dashboard, Ray, Gradio and Flask apps
    r"|\bLocalCluster\(|\bdashboard_address\b|\bdiagnostics_port\b|\bray\.init\(|\.launch\(|\bapp\.run\("
    # the skill tells the user to run the service itself: "Run Flux locally (see its repo)"
    r"|\brun\s+(?:the\s+|your\s+own\s+)?(?:[\w.-]+\s+){0,2}?(?:server\s+|service\s+|instance\s+)?locally\b",
    re.I,
)
# A server of the user's reached over SSH, named by a placeholder the user fills in: `ssh user@host`,
# `scp file <user>@<server>:`, `sshpass -p … ssh root@your-server`, `ssh "$HOST"`; and a skill script given
# `<host>` when the skill's programs run ssh (`ssh-key-setup.sh deploy <host> [user]`, the ninth blind check).
_SSH_TO_PLACEHOLDER = re.compile(
    r"\b(?:ssh|scp|sftp|rsync|sshpass|ssh-copy-id|mosh)\b[^\n`]{0,120}?(?:<(?:user@)?(?:host|server|hostname|ip|remote|vps)"
    r"[\w-]{0,20}>|(?<![\w.-])[\w$<>{}-]{1,30}@(?:host|server|hostname|remote|vps|your[-_][\w-]{1,30}|<[^>\n]{1,30}>"
    r"|\$\{?\w{1,30}\}?)(?![\w.-])|\$\{?(?:HOST|SERVER|REMOTE|SSH_HOST|TARGET_HOST)\w{0,20}\}?)", re.I)
_HOST_ARGUMENT = re.compile(r"\.(?:sh|py)\b[^\n`]{0,60}?\s<(?:host|server|hostname|ip)>", re.I)
_RUNS_SSH = re.compile(r"^[^#\n]*\b(?:ssh|sshpass|ssh-copy-id|scp)\s", re.M)
_PROXY_OPTION = re.compile(r"\bproxy\b", re.I)
# A loopback URL in a skill that tests or explores the user's own web app (Playwright, Cypress, `codegen`, a
# `baseURL`): the app under development, which a task's container runs as well (the tenth blind check's test planner).
_APP_UNDER_TEST = re.compile(r"\b(?:playwright|cypress|puppeteer|selenium|webdriver|e2e|end-to-end|baseURL|base_url)\b", re.I)
# A loopback URL on a line about an OAuth redirect or callback ("Redirect URI: http://localhost:3000/callback"):
# a sign-in, reported as such rather than as a private host.
_OAUTH_REDIRECT = re.compile(r"redirect|callback|oauth", re.I)
# Wording around a private URL that says the skill refuses it: "# security tests (should be rejected)",
# "安全验证测试（应被拒绝）", "blocked as SSRF".
_REFUSED_HOST = re.compile(r"\bssrf\b|\b(?:should|must)\s+be\s+(?:rejected|refused|blocked|denied)\b|应被拒绝|应拒绝|应拦截", re.I)


def _refused(doc: SkillDoc, pos: int) -> bool:
    """The address at `pos` is one the skill says it turns away: its line or the few lines above say so."""
    line_start, line_end = doc.line_at(pos)
    return bool(_REFUSED_HOST.search(doc.text[max(0, line_start - 300):line_end]))


def host_findings(skill: ParsedSkill, docs: list[SkillDoc], out: list[Finding]) -> None:
    """Append the private-host findings of SKILL.md's `docs` (frontmatter, body)."""
    body = docs[1].text
    starts_server = None
    for doc in docs:
        if not doc.text or "://" not in doc.text:
            continue
        for m in _PRIVATE_HOST.finditer(doc.text):
            host = m.group("host")
            if _LOOPBACK.match(host):
                if _OAUTH_REDIRECT.search(line_of(doc, m.start())):
                    # Not a host to reach (the tool listens there itself) but where a sign-in returns to:
                    # the skill needs the user's own login and an app registered with the provider.
                    out.append(Finding(PRIVATE, "signs in through a login redirect to a local port (OAuth)",
                                       clip(line_of(doc, m.start())), doc.line_no(m.start()), doc.path))
                    continue
                if starts_server is None:
                    starts_server = bool(_STARTS_SERVER.search(body)) or any(
                        _STARTS_SERVER.search(b.get("code", "")) for b in skill.code_blocks
                    )
                if starts_server:
                    continue  # the skill runs its own local server; a container can do the same
                if _APP_UNDER_TEST.search(body):
                    continue  # the user's app under test, served by the project the agent works in
            if _refused(doc, m.start()):
                continue  # a URL the skill's own guard must turn away (an SSRF test), not a host it uses
            if _LOOPBACK.match(host) and _PROXY_OPTION.search(re.sub(r"\S*" + re.escape(m.group(0)) + r"\S*", " ", line_of(doc, m.start()))):
                continue  # "--proxy: Proxy URL (e.g., http://localhost:7890)": where the user's own proxy would be, if any
            out.append(Finding(PRIVATE, "uses a private network host", clip(m.group(0)), doc.line_no(m.start()), doc.path))
    ssh = next(((doc, m) for doc in docs for m in _SSH_TO_PLACEHOLDER.finditer(doc.text)), None)
    if ssh is None and any(_RUNS_SSH.search(d.text) for d in program_docs(skill)):
        ssh = next(((doc, m) for doc in docs for m in _HOST_ARGUMENT.finditer(doc.text)), None)
    if ssh is not None:
        doc, m = ssh
        out.append(Finding(PRIVATE, "works on the user's own server over SSH", clip(line_of(doc, m.start()).strip()),
                           doc.line_no(m.start()), doc.path))
    for doc in docs:
        if (m := next((m for m in _LAN_DEVICE.finditer(doc.text) if not _refused(doc, m.start())), None)):
            out.append(Finding(PRIVATE, "uses a private network host", clip(line_of(doc, m.start()).strip()),
                               doc.line_no(m.start()), doc.path))
        elif (m := next((m for m in _SAME_NETWORK.finditer(doc.text)
                         if not skill_requirements.NEGATION_BEFORE.search(doc.text[doc.line_at(m.start())[0]:m.start()])), None)):
            out.append(Finding(PRIVATE, "uses a device on the user's own network", clip(line_of(doc, m.start()).strip()),
                               doc.line_no(m.start()), doc.path))
