"""The demo's scaffolding, outside the installed apps: the scripted OpenAI-compatible server that
scripts/record-demo-cassette records the demo cassette from, and its canned task construction
answers and rollout turns. Used by that script and by the tests, never by `facet` itself (which
replays the recorded cassette, scenarios/fixtures/demo.cassette.jsonl)."""
