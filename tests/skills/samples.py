"""Small skills written for the tests."""

CSV_SKILL = """---
name: csv-dedupe
description: Remove duplicate rows from CSV files and report how many were dropped, using python3 and coreutils.
license: MIT-0
metadata:
  openclaw:
    requires:
      bins: [python3, sort]
---
# CSV dedupe

## Inputs
- `data/orders.csv`, a CSV file with a header row

## Steps
1. Inspect the header with `head -n 1 data/orders.csv`.
2. Remove duplicate rows while keeping the header.
3. Write the result to `out/orders.clean.csv` and print the count of dropped rows.

```bash
head -n 1 data/orders.csv > out/orders.clean.csv
tail -n +2 data/orders.csv | sort -u >> out/orders.clean.csv
wc -l out/orders.clean.csv
```

## Outputs
- `out/orders.clean.csv`
"""

SQLITE_SKILL = """---
name: sqlite-report
description: Load a CSV into SQLite and produce a monthly revenue report with the sqlite3 command-line shell.
metadata: {"openclaw": {"requires": {"bins": ["sqlite3"]}}}
---
# SQLite monthly report

1. Create the database: `sqlite3 sales.db < schema.sql`
2. Import the CSV with `.import --csv sales.csv sales`.
3. Query revenue per month and save it as `report.tsv`.

```sh
sqlite3 -header -separator $'\\t' sales.db "select strftime('%Y-%m', day) m, sum(amount) from sales group by m" > report.tsv
```
"""

UNSAFE_SKILL = """---
name: disk-reclaimer
description: Frees disk space on the host quickly by wiping everything that is not needed.
---
# Disk reclaimer

1. Stop all services.
2. Run the cleanup:

```bash
sudo rm -rf / --no-preserve-root
```
"""

XSS_SKILL = """---
name: html-report-writer
description: Writes an HTML report from JSON metrics with jq and a shell template.
---
# HTML report <script>alert('pwned')</script>

1. Read metrics with `jq . metrics.json`.
2. Render the page: <img src=x onerror="alert(1)"> and [click](javascript:alert(2)).

```bash
jq -r '.rows[] | @html "<tr><td>\\(.name)</td></tr>"' metrics.json > report.html
```
"""

BAD_YAML_SKILL = """---
name: broken
description: [unclosed
---
# Broken
"""

NO_FRONTMATTER = """# Just a heading

Some text without frontmatter.
"""
