"""The run layer: typed configs, one `execute` for every system, sweeps on a pool or Ray.

- `config`: `RunConfig`, the frozen dataclass base of every system's config (`option`,
  `check`, `ConfigError`).
- `system`: what a system provides (`System.plan/load/run`, `Plan`, `Result`, `PlotSpec`).
- `layer`: `RunSpec` and `execute` (ledger before data, run directory, plots, summary).
- `cli`: command-line commands generated from configs.
- `registry` / `catalog`: systems by name.
- `sweep`: grids of runs on a local process pool or Ray.
- `console`: the command line's console conventions (one-line warnings and errors, SIGTERM).
"""
