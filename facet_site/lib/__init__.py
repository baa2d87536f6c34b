"""Django-free code the apps build on: the Docker engine, the skill corpus reader and filters,
embeddings and retrieval, Harbor's task format, validation, rollouts, the LLM client and
statistics. Nothing here imports Django or an app; settings arrive as arguments."""
