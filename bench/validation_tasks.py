"""The three generated Harbor tasks of the validation benchmarks (bench/validation.py,
bench/validation_trials.py): small but realistic, each FROM facet-base:bookworm with a CSV or JSON
fixture, a solve.sh that transforms it (python3, jq, awk + sqlite3) and a pytest verifier that
writes /logs/verifier/reward.txt and junit.xml. Seeded, so every run and both benchmarks see the
same tasks."""
from __future__ import annotations

import csv
import io
import json
import random
import textwrap
from pathlib import Path

from facet_site.lib import validation as v


TASK_TOML = """\
version = "1.0"

[metadata]
difficulty = "easy"
category = "data-processing"
tags = ["{tag}", "bench"]

[verifier]
timeout_sec = 120.0

[agent]
timeout_sec = 120.0

[environment]
build_timeout_sec = 600.0
cpus = 1
memory_mb = 2048
"""

TEST_SH = """\
#!/bin/bash
# Harbor verifier: only /logs/verifier/reward.txt counts.
cd /app
python3 -m pytest -q -p no:cacheprovider --junitxml=/logs/verifier/junit.xml /tests/test_outputs.py
if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def _dockerfile(nonce: str) -> str:
    return textwrap.dedent(f"""\
        # facet bench/validation.py, run {nonce}
        FROM facet-base:bookworm
        WORKDIR /app
        COPY data/ /app/data/
        RUN mkdir -p /app/out && chmod 755 /app/out
        """)


def _sales_task(rng: random.Random) -> dict:
    regions = ["north", "south", "east", "west"]
    products = ["widget", "gadget", "gizmo", "doohickey", "sprocket"]
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["date", "region", "product", "units", "unit_price"])
    for i in range(400):
        w.writerow([f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}", rng.choice(regions),
                    rng.choice(products), rng.randint(1, 40), f"{rng.uniform(1, 90):.2f}"])
    return {
        "name": "sales-summary",
        "tool": "python3",
        "summary": "CSV fixture (400 rows) -> per-region units/revenue JSON, python3 in solve.sh",
        "fixture": ("sales.csv", out.getvalue()),
        "instruction": textwrap.dedent("""\
            # Sales summary

            `/app/data/sales.csv` has one row per sale: `date,region,product,units,unit_price`.

            Write `/app/out/summary.json`, a JSON object with
            * `"regions"`: for every region, `{"units": <total units>, "revenue": <sum of
              units * unit_price, rounded to 2 decimals>}`;
            * `"total_revenue"`: the sum of all revenue, rounded to 2 decimals;
            * `"top_region"`: the region with the highest revenue.
            """),
        "solve": textwrap.dedent("""\
            #!/bin/bash
            set -euo pipefail
            cd /app
            mkdir -p /app/out
            python3 - <<'EOF'
            import csv, json
            regions = {}
            with open("/app/data/sales.csv", newline="") as fh:
                for row in csv.DictReader(fh):
                    r = regions.setdefault(row["region"], {"units": 0, "revenue": 0.0})
                    r["units"] += int(row["units"])
                    r["revenue"] += int(row["units"]) * float(row["unit_price"])
            for r in regions.values():
                r["revenue"] = round(r["revenue"], 2)
            summary = {"regions": regions,
                       "total_revenue": round(sum(r["revenue"] for r in regions.values()), 2),
                       "top_region": max(regions, key=lambda k: regions[k]["revenue"])}
            with open("/app/out/summary.json.tmp", "w") as fh:
                json.dump(summary, fh, indent=2)
            EOF
            mv /app/out/summary.json.tmp /app/out/summary.json
            """),
        "tests": textwrap.dedent("""\
            import csv
            import json
            from pathlib import Path

            OUT = Path("/app/out/summary.json")


            def expected():
                regions = {}
                with open("/app/data/sales.csv", newline="") as fh:
                    for row in csv.DictReader(fh):
                        r = regions.setdefault(row["region"], [0, 0.0])
                        r[0] += int(row["units"])
                        r[1] += int(row["units"]) * float(row["unit_price"])
                return regions


            def load():
                assert OUT.is_file(), "/app/out/summary.json is missing"
                return json.loads(OUT.read_text())


            def test_regions_complete():
                assert set(load()["regions"]) == set(expected())


            def test_region_figures():
                got = load()["regions"]
                for region, (units, revenue) in expected().items():
                    assert got[region]["units"] == units
                    assert abs(got[region]["revenue"] - revenue) < 0.01


            def test_totals():
                data, exp = load(), expected()
                assert abs(data["total_revenue"] - sum(r[1] for r in exp.values())) < 0.05
                assert data["top_region"] == max(exp, key=lambda k: exp[k][1])
            """),
        "verifier_repair": textwrap.dedent("""\


            def test_revenue_is_rounded():
                for figures in load()["regions"].values():
                    assert round(figures["revenue"], 2) == figures["revenue"]
            """),
    }


def _users_task(rng: random.Random) -> dict:
    first = ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Radia",
             "Leslie", "Margaret", "John"]
    plans = ["free", "pro", "team", "enterprise"]
    users = []
    for i in range(250):
        name = f"{rng.choice(first)} {chr(65 + rng.randrange(26))}."
        email = f"{name.split()[0]}.{i}@Example.COM" if i % 3 else f"{name.split()[0].lower()}{i}@example.com"
        users.append({"id": 1000 + (i * 37) % 250, "name": name, "email": email,
                      "active": rng.random() < 0.6, "plan": rng.choice(plans),
                      "signup": f"2023-{1 + i % 12:02d}-{1 + i % 28:02d}"})
    rng.shuffle(users)
    return {
        "name": "active-users",
        "tool": "jq",
        "summary": "JSON fixture (250 users) -> CSV of active users, jq in solve.sh",
        "fixture": ("users.json", json.dumps(users, indent=1) + "\n"),
        "instruction": textwrap.dedent("""\
            # Active users export

            `/app/data/users.json` is a list of user objects (`id`, `name`, `email`, `active`,
            `plan`, `signup`).

            Write `/app/out/active_users.csv` with the header `id,name,email,plan` and one row
            per user whose `active` is true, sorted by `id` ascending, with the email in lower
            case.
            """),
        "solve": textwrap.dedent("""\
            #!/bin/bash
            set -euo pipefail
            mkdir -p /app/out
            echo 'id,name,email,plan' > /app/out/active_users.csv.part
            jq -r '[.[] | select(.active)] | sort_by(.id) | .[] | [.id, .name, (.email | ascii_downcase), .plan] | @csv' /app/data/users.json >> /app/out/active_users.csv.part
            mv /app/out/active_users.csv.part /app/out/active_users.csv
            """),
        "tests": textwrap.dedent("""\
            import csv
            import json
            from pathlib import Path

            OUT = Path("/app/out/active_users.csv")


            def rows():
                assert OUT.is_file(), "/app/out/active_users.csv is missing"
                with OUT.open(newline="") as fh:
                    return list(csv.reader(fh))


            def expected():
                users = json.loads(Path("/app/data/users.json").read_text())
                return sorted((u for u in users if u["active"]), key=lambda u: u["id"])


            def test_header():
                assert rows()[0] == ["id", "name", "email", "plan"]


            def test_only_active_sorted():
                got = [int(r[0]) for r in rows()[1:]]
                assert got == [u["id"] for u in expected()]


            def test_fields():
                for row, user in zip(rows()[1:], expected()):
                    assert row[1] == user["name"]
                    assert row[2] == user["email"].lower()
                    assert row[3] == user["plan"]
            """),
        "verifier_repair": textwrap.dedent("""\


            def test_no_blank_lines():
                assert all(rows()), "blank line in /app/out/active_users.csv"
            """),
    }


def _sensor_task(rng: random.Random) -> dict:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["sensor_id", "timestamp", "celsius"])
    lines = []
    for i in range(600):
        sensor = f"s{rng.randint(1, 6):02d}"
        ts = f"2024-05-{1 + rng.randrange(10):02d}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:00"
        roll = rng.random()
        if roll < 0.04:
            value = ""
        elif roll < 0.07:
            value = "NaN"
        elif roll < 0.10:
            value = f"{rng.choice([-1, 1]) * rng.uniform(80, 999):.1f}"  # sensor glitch
        else:
            value = f"{rng.gauss(21, 6):.1f}"
        lines.append([sensor, ts, value])
        if rng.random() < 0.05:
            lines.append([sensor, ts, value])  # duplicated upload
    for line in lines:
        w.writerow(line)
    return {
        "name": "sensor-daily",
        "tool": "awk+sqlite3",
        "summary": "CSV fixture (~630 readings, invalid and duplicate rows) -> daily averages CSV, "
                   "awk and sqlite3 in solve.sh",
        "fixture": ("readings.csv", out.getvalue()),
        "instruction": textwrap.dedent("""\
            # Daily sensor averages

            `/app/data/readings.csv` holds temperature readings (`sensor_id,timestamp,celsius`).
            Some are broken: empty or `NaN` values, glitches outside -50..60 °C, and exact
            duplicate rows from repeated uploads.

            Drop the broken rows and the duplicates, then write `/app/out/daily_avg.csv` with the
            header `sensor_id,date,avg_celsius`: one row per sensor and day (the date is the
            first 10 characters of the timestamp), sorted by sensor then date, the average with
            2 decimals.
            """),
        "solve": textwrap.dedent("""\
            #!/bin/bash
            set -euo pipefail
            cd /app
            mkdir -p /app/out
            awk -F, 'NR > 1 && $3 != "" && $3 != "NaN" && $3 + 0 >= -50 && $3 + 0 <= 60' /app/data/readings.csv | sort -u > /tmp/valid.csv
            sqlite3 /tmp/readings.db <<'SQL'
            CREATE TABLE r (sensor_id TEXT, ts TEXT, celsius REAL);
            .mode csv
            .import /tmp/valid.csv r
            .headers on
            .output /app/out/daily_avg.csv
            SELECT sensor_id, substr(ts, 1, 10) AS date, printf('%.2f', avg(celsius)) AS avg_celsius
              FROM r GROUP BY 1, 2 ORDER BY 1, 2;
            SQL
            """),
        "tests": textwrap.dedent("""\
            import csv
            from collections import defaultdict
            from pathlib import Path

            OUT = Path("/app/out/daily_avg.csv")


            def expected():
                seen, sums = set(), defaultdict(list)
                with open("/app/data/readings.csv", newline="") as fh:
                    for sensor, ts, value in list(csv.reader(fh))[1:]:
                        if value in ("", "NaN") or not -50 <= float(value) <= 60:
                            continue
                        if (sensor, ts, value) in seen:
                            continue
                        seen.add((sensor, ts, value))
                        sums[(sensor, ts[:10])].append(float(value))
                return {k: sum(v) / len(v) for k, v in sorted(sums.items())}


            def rows():
                assert OUT.is_file(), "/app/out/daily_avg.csv is missing"
                with OUT.open(newline="") as fh:
                    return list(csv.reader(fh))


            def test_header():
                assert rows()[0] == ["sensor_id", "date", "avg_celsius"]


            def test_groups_and_order():
                assert [(r[0], r[1]) for r in rows()[1:]] == list(expected())


            def test_averages():
                exp = expected()
                for sensor, date, avg in rows()[1:]:
                    assert abs(float(avg) - exp[(sensor, date)]) <= 0.006
            """),
        "verifier_repair": textwrap.dedent("""\


            def test_two_decimals():
                for row in rows()[1:]:
                    assert len(row[2].split(".")[-1]) == 2
            """),
    }


def write_tasks(root: Path, nonce: str, seed: int = 11) -> list[tuple[Path, dict]]:
    rng = random.Random(seed)
    tasks = []
    for make in (_sales_task, _users_task, _sensor_task):
        spec = make(rng)
        d = root / f"bench-{spec['name']}-{nonce}"
        (d / "environment" / "data").mkdir(parents=True)
        (d / "solution").mkdir()
        (d / "tests").mkdir()
        (d / "instruction.md").write_text(spec["instruction"])
        (d / "task.toml").write_text(TASK_TOML.format(tag=spec["tool"]))
        (d / "environment" / "Dockerfile").write_text(_dockerfile(nonce))
        fixture_name, fixture = spec["fixture"]
        (d / "environment" / "data" / fixture_name).write_text(fixture)
        (d / "solution" / "solve.sh").write_text(spec["solve"])
        (d / "solution" / "solve.sh").chmod(0o755)
        (d / "tests" / "test.sh").write_text(TEST_SH)
        (d / "tests" / "test.sh").chmod(0o755)
        (d / "tests" / "test_outputs.py").write_text(spec["tests"])
        tasks.append((d, spec))
    return tasks


def describe_task(d: Path, spec: dict) -> dict:
    fixture_name, fixture = spec["fixture"]
    return {
        "name": spec["name"],
        "dir_name": d.name,
        "what": spec["summary"],
        "fixture": {"file": f"environment/data/{fixture_name}", "bytes": len(fixture.encode()),
                    "lines": fixture.count("\n")},
        "solve_sh_lines": spec["solve"].count("\n"),
        "solve_sh_commands": len(v.solution_steps(spec["solve"])),
        "partials_derived": len(v.derive_partial_solutions(spec["solve"])),
        "tests": spec["tests"].count("\ndef test_"),
        "dockerfile": _dockerfile("<nonce>"),
    }
