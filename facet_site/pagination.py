"""Pagination helpers for the JSON API."""


class LazyPage:
    """Lets django-ninja's @paginate slice the queryset first, then serialises only the page."""

    def __init__(self, qs, serialise):
        self.qs, self.serialise = qs, serialise

    def count(self):
        return self.qs.count()

    def __len__(self):
        return self.count()

    def __getitem__(self, item):
        return [self.serialise(row) for row in self.qs[item]]
