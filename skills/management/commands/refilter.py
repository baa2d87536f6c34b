"""`facet refilter`: run the filters, the safety scan and the credential check again over every
current skill, so rule updates reach skills already stored. Reviewer safety decisions are kept."""
from .reclassify import Command as ReclassifyCommand


class Command(ReclassifyCommand):
    help = "Re-run the skill filters and the safety scan over the stored corpus and summarise what changed."
    action = "refilter"
