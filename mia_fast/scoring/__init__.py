"""Scoring: texts and methods into score columns, over the engines of the registry.

- ``config``: the typed run configuration (``RunConfig``: model, scoring, compute, output), built by the CLI
- ``engines``: the engine registry (a model source's kind: its engine, checks and limits)
- ``detector``: the ``Detector``, every requested method over texts, each pass run once
- ``method_runs``: running the registered methods (settings made ready, checks, hooks, passes, scores)
- ``planner``: the passes the methods ask for, deduplicated and ordered
- ``run_plan``: a file's run planned once; ``columns``: the producers of its columns (online detection one of them)
- ``runner``: the resumable file runner (also what each Ray actor runs on its shard)
"""
