"""The grammars of `privrl data import` explained in full, for a person at an 80-column
terminal: the column mapping of a table (`COLUMNS`) and the declared spaces (`SPACES`), shown
by `privrl help columns|spaces`, and the summary of both that ends `privrl data import --help`
(`SUMMARY`). Every line fits 80 columns; the parsers are `privrl.data.io.parse_column_mapping`
and `privrl.data.tools.parse_space`.
"""

SUMMARY = """Column mapping (--columns, -c) of a table, KEY=COL,...; COL|COL is a vector:
  required: episode=COL,obs=COL|COL,action=COL,reward=COL
  optional: next_obs=COL|COL terminated=COL truncated=COL
            behaviour_prob=COL unit=COL timestep=COL
  --bandit (one row per impression): action=COL,reward=COL required;
            obs=COL|COL behaviour_prob=COL position=COL episode=COL unit=COL
Spaces (--observation-space, --action-space):
  discrete:N  discrete:N:START  multidiscrete:N1,N2  box:LOW,HIGH
  box:LOW:HIGH:DIM
  box:FILE.json  box:FILE.npz

Examples:
  privrl data import visits.csv --out visits.h5 --unit column=user \\
      -c "episode=patient,obs=s1|s2,action=dose,reward=y" \\
      --action-space discrete:4
  privrl data import log.csv --out log.h5 --bandit \\
      -c "action=item,reward=click,behaviour_prob=pscore" \\
      --action-space discrete:80
  privrl data import my-minari-dataset-v0 --out d.h5 --unit episode

More: `privrl help columns`, `privrl help spaces`.
"""

COLUMNS = """\
The column mapping of `privrl data import TABLE --columns MAPPING` (-c) says
which table columns hold which dataset field. One row of the table is one
transition; the rows of an episode share its episode id.

  MAPPING = KEY=COL[,KEY=COL...]      (KEY=COL|COL|... for a vector field)

Required keys:
  episode         the episode id (rows are grouped by it, episodes sorted by it)
  obs             the observation: one column, or COL|COL|... for a vector
  action          the action: one column, or COL|COL|...
  reward          the reward

Optional keys:
  next_obs        the next observation (as many columns as obs); without it the
                  last row of each episode becomes the final observation and its
                  action and reward are dropped (a note says so)
  terminated      1 where the episode ended in a terminal state
  truncated       1 where the episode was cut (a time limit)
  behaviour_prob  the logging policy's probability of the logged action (OPE)
  unit            the unit id of each row (a user), for user-level privacy
  timestep        the step index: orders the rows within an episode

Examples:
  privrl data import visits.csv --out visits.h5 --action-space discrete:4 \\
      -c "episode=patient,obs=s1|s2,action=dose,reward=y"
  privrl data import logs.parquet --out logs.h5 \\
      -c "episode=ep,obs=x,action=a,reward=r,terminated=done,behaviour_prob=p"

Contextual-bandit logs (`privrl data import LOG --bandit`): one row per
impression, no next_obs. Each row becomes a one-step episode, and the dataset
declares horizon 1 and discount 1, so `privrl ope ips|snips|dr` need neither
--max-horizon nor --gamma. Keys:
  action          the action (item) taken                          (required)
  reward          the reward (a click)                             (required)
  obs             the context: one column, or COL|COL|...
  behaviour_prob  the logging policy's propensity of the action (for OPE)
  position        the slot the action was shown at; it is appended to the
                  context, so the observation is (obs..., position)
  episode         a unique impression id (default: the row number)
  unit            the privacy unit of each row (a user)
A log with neither obs nor position is context-free: every observation is 0
in the declared space discrete:1. Declare the observation space over the
context columns and the position, in that order.

  privrl data import obd.csv --out obd.h5 --bandit --action-space discrete:80 \\
      -c "position=pos,action=item_id,reward=click,behaviour_prob=pscore" \\
      --observation-space discrete:3:1          # positions 1..3

Quote the mapping: `|` is a pipe to the shell. See also `privrl help spaces`.
"""

SPACES = """\
A declared space (`privrl data import --observation-space SPACE`, and
`--action-space`) is public information about the data; a space inferred from
the data is derived from private values, so private commands refuse it.

  discrete:N              one integer column with values 0..N-1
  discrete:N:START        the same with values START..START+N-1 (e.g.
                          discrete:3:1 for 1-based codes 1..3; OPE reads
                          them, the tabular learners need 0-based codes)
  multidiscrete:N1,N2     integer-coded categorical columns, column i in 0..Ni-1
  box:LOW,HIGH            one bound for every mapped column
  box:LOW:HIGH:DIM        a DIM-vector (DIMxDIM2 for a matrix), e.g. box:-1:1:4
  box:FILE.json           per-column bounds: arrays `low` and `high`
  box:FILE.npz            the same, as a numpy archive
  {"type": ...}           a space as JSON (the form a dataset's metadata stores)

The same forms declare actions (usually discrete:N or box:LOW:HIGH:DIM).
Values outside a declared box are clipped into it. Discrete codes outside a
declared discrete space (observations or actions) are a coding error, e.g.
1-based codes with discrete:N (which takes 0..N-1): the import stops with the
column and how many values are outside, unless --clip-out-of-space asks for
clipping to the nearest code. Import runs on the data holder's own machine,
before anything is released, so these counts are theirs to see; a note says
how many values were clipped only when some were, and the dataset records
only that clipping applies, never how often.

Examples:
  --observation-space multidiscrete:3,5,2
  --observation-space box:-4.8:4.8:4 --action-space discrete:2
  --observation-space box:bounds.json
"""


# The options' help texts of `privrl data import` (kept beside the grammars they point to).
OPTIONS = {
    "source": "Table file, or a local Minari dataset id/directory.",
    "out": "Dataset file to write (.h5).",
    "columns": "Column mapping for tables, KEY=COL,... (see below and `privrl help columns`).",
    "format": "parquet, csv or minari (default: from the file name).",
    "observation_space": (
        "Declared observation space, e.g. discrete:N or box:LOW,HIGH (see `privrl help "
        "spaces`); else inferred from the data, which private work refuses. Values outside "
        "a box are clipped into it; discrete codes outside the space are refused (see "
        "--clip-out-of-space)."
    ),
    "clip_out_of_space": (
        "Clip discrete observation and action codes outside --observation-space / "
        "--action-space into them (the nearest code) instead of refusing the import "
        "(--clip-observations is the old name). Without it, such codes (e.g. 1-based codes "
        "with discrete:N, which takes 0..N-1) stop the import with the column and how many "
        "values are outside; with it, a note says how many were clipped, only if any were."
    ),
    "action_space": (
        "discrete:N or box:LOW:HIGH:DIM (else inferred); tables only. Discrete action "
        "codes outside it are refused (see --clip-out-of-space)."
    ),
    "unit": (
        "Privacy unit: episode (each episode its own unit) or column=NAME (the column, or "
        "Minari episode metadata/info key, holding each episode's user: stored as the "
        "unit ids that `--unit user` and the ledger use)."
    ),
    "units": "Declared (public) number of units, recorded in the metadata; never counted.",
    "bandit": (
        "Read the table as a contextual-bandit log: one row per impression (context, "
        "action, reward, propensity, optional position), no next_obs. Each row becomes a "
        "one-step episode and horizon 1 is declared (see `privrl help columns`)."
    ),
    "keep_columns": (
        "Comma-separated numeric table columns kept per transition (e.g. a target "
        "policy's probability of the logged action, for --target-policy column:NAME)."
    ),
}
