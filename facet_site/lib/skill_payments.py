"""Paying per call, for the private verdicts (skill_private), Django-free: a skill that spends from the
user's wallet (x402 pay-per-call APIs, micropayments, a wallet to fund, a request that approves its own
payment) needs money a task cannot have. Pay-side wording only: a seller's paywall spends nothing of the
user's, and a skill that says a wallet is optional or has free tools is not held for it."""
from __future__ import annotations

import re

from facet_site.lib import skill_requirements
from facet_site.lib.skill_findings import PRIVATE, Finding, SkillDoc, clip, line_of
from facet_site.lib.skill_safety_rules import load_rules

# Spending the user's money per call: x402 pay-per-call APIs and wallets to be funded. Pay-side wording
# only: a skill that sells behind a paywall or receives payments spends nothing of the user's.
_PAYS = re.compile(
    r"\bpay(?:s|ing)?\s+(?:for|per|with|via|in|from)\b|\bpaid\s+(?:via|with|through|by|per|in|from)\b"
    r"|\bmake\s+(?:\w+\s+){0,2}?(?:micro)?payments?\b|\bmicropayments?\b|\bpay[- ]per[- ](?:call|request|use|query)\b"
    r"|\bfund\s+(?:your|the|an?)\s+(?:[\w-]+\s+)?wallet\b|\bwallet\s+(?:has|with|needs?)\s+(?:sufficient|enough)\b"
    r"|\bjust\s+pay\b"
    # the same in Chinese and Japanese: "使用USDC支付", "支付方式通过x402实现", "USDC转账至", "付费端点", "x402で支払う"
    r"|(?:使用|用|通过|以)\s*(?:USDC|x402|钱包|稳定币)\s*(?:进行|来)?\s*(?:支付|付款|付费)|(?:支付|付款)[^\n。]{0,12}?(?:USDC|x402)"
    r"|USDC\s*转账|付费(?:端点|接口|调用)|按(?:次|调用)(?:计费|付费|收费)|(?:USDC|x402)\s*で\s*(?:支払|決済)",
    re.I,
)
# A seller's line ("callers pay per request", "charge clients in USDC") is about someone else's money,
# unless it says the skill pays too ("pay for services, sell your own").
_SELLS = re.compile(r"\b(?:paywall\w*|monetiz\w*|accept(?:s|ing)?\s+payments?|receiv\w*\s+payments?|charg\w+|sell\w*|earn\w*"
                    r"|callers?|clients?|customers?|buyers?)\b", re.I)
_BUYS = re.compile(r"\bmake\s+(?:\w+\s+){0,2}?(?:micro)?payments?|\bfund\s|\byour\s+wallet|\byou\s+pay|\bagents?\s+(?:to\s+)?pays?\b"
                   r"|\b(?:charged|billed)\s+(?:to|from)\s+your\b"
                   r"|\bpay\s+for\s+(?:apis?|services?|calls?|requests?|access|data)\b", re.I)
# ASCII boundaries: in Chinese or Japanese text the name touches the characters around it ("使用USDC支付").
_MONEY_RAIL = re.compile(r"(?<![A-Za-z0-9])(?:x402|usdc|stablecoins?|sats)(?![A-Za-z0-9])|\b402\s+payment|\bwallet|\blightning\b"
                         r"|钱包|稳定币", re.I)
# Billed per call by the skill itself, with or without a wallet named: "every API call billed via SkillPay
# (0.001 USDT / call)", "$0.002 per request", "每次调用消耗1个令牌，约0.001美元", "按使用次数计费". The price must
# be money, not a model's tokens ("~180 tokens per call"). A free trial still ends in paying, so it is no
# free way.
_BILLED_PER_CALL = re.compile(
    r"\bbill(?:ed|s|ing)?\s+(?:\w+\s+){0,3}?(?:per|for\s+each|on\s+each)\s+(?:api\s+)?(?:call|request|query|use|run)\b"
    r"|\b(?:every|each)\s+(?:api\s+)?(?:call|request|query)\s+(?:is\s+)?(?:billed|charged|costs?)\b"
    r"|\bper[- ](?:call|request|use)\s+billing\b"
    r"|(?:\$\s?\d[\d.,]*|\b\d[\d.,]*\s*(?:usd[tc]?|dollars?))\s*(?:/|per)\s*(?:api\s+)?(?:call|request|query|use)\b"
    r"|按(?:使用)?次(?:数)?(?:计费|付费|收费)|每次(?:调用|分析|查询|使用|请求)[^\n。]{0,10}?(?:消耗|收取|扣除|花费|计费|收费)[^\n。]{0,16}?"
    r"(?:美元|USD[TC]?|[0-9.]\s*元)",
    re.I,
)
# A way without paying: the wallet is optional, or there is a free tier (skill_requirements.FREE_TIER).
_FREE_OF_PAYMENT = re.compile(
    r"\bwallet\s+(?:is\s+)?optional|\boptional[^.\n]{0,30}\b(?:paid|wallet|payments?)\b|\bwithout\s+(?:a\s+)?wallet"
    r"|\bno\s+(?:wallet|payment)\s+(?:is\s+)?(?:required|needed)",
    re.I,
)

# A request that approves its own payment (`"auto_pay": true`): the safety rule payment.auto-pay's patterns, read from the rule file
# so the two verdicts cannot drift apart.
_AUTO_PAY_RULE = "payment.auto-pay"


def payment_findings(docs: list[SkillDoc], programs: list[SkillDoc], out: list[Finding]) -> None:
    """Append the "pays per call" finding of SKILL.md's `docs` (frontmatter, body), then of its `programs`."""
    _payments(docs, out)
    _auto_pay(programs, out)


def _auto_pay(programs: list[SkillDoc], out: list[Finding]) -> None:
    """A program that pays by itself for each call: the user's money, which a task cannot have."""
    auto_pay = next(r.patterns for r in load_rules().rules if r.id == _AUTO_PAY_RULE)
    for doc in programs:
        if m := next((m for p in auto_pay for m in [p.search(doc.text)] if m), None):
            out.append(Finding(PRIVATE, "pays per call from a funded wallet", clip(line_of(doc, m.start())),
                               doc.line_no(m.start()), doc.path))
            return


def _payments(docs: list[SkillDoc], out: list[Finding]) -> None:
    """A skill that pays per call from the user's wallet (x402, micropayments, "fund your wallet"), unless
    a wallet is said to be optional or some tools are free; the first such line."""
    if any(_FREE_OF_PAYMENT.search(doc.text) or skill_requirements.FREE_TIER.search(doc.text) for doc in docs):
        return
    patterns = [(_BILLED_PER_CALL, "pays per call (billed for each call)")]
    if any(_MONEY_RAIL.search(doc.text) for doc in docs):  # paying wording counts beside a payment rail only
        patterns.append((_PAYS, "pays per call from a funded wallet"))
    for doc in docs:
        found = [(m, reason) for pattern, reason in patterns for m in pattern.finditer(doc.text)]
        for m, reason in sorted(found, key=lambda f: f[0].start()):
            line = line_of(doc, m.start())
            if skill_requirements.hedged(doc.text, m.start()) or (_SELLS.search(line) and not _BUYS.search(line)):
                continue
            out.append(Finding(PRIVATE, reason, clip(line), doc.line_no(m.start()), doc.path))
            return
