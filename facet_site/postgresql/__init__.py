"""PostgreSQL for facet: Django's backend with a cap on the connections one process opens at once
(base.py); `DATABASES["default"]["ENGINE"]` names this package when DATABASE_URL is PostgreSQL."""
