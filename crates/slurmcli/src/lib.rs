//! Slurm-compatible command semantics, as pure functions: what `sbatch` accepts on its command
//! line and in `#SBATCH` lines, Slurm's time, memory and GRES formats, job arrays,
//! dependencies, signals, hostlists, output-file patterns, and the environment a task sees
//! (`SLURM_*`, the same under `TANDEM_*`, and PyTorch's rendezvous variables).
//!
//! **Invariant:** no IO, no clock, no environment reads: the caller passes the script text, the
//! arguments and the current time; errors are values whose messages read like Slurm's.

mod commands;
pub mod container;
mod env;
pub mod envvars;
mod filters;
mod formats;
pub mod getopt;
mod hostlist;
pub mod jobdesc;
pub mod keywords;
mod limits;
mod options;
mod query;
mod report;
pub mod resv;
pub mod sacctmgr;
mod srun;
pub mod update;
mod visible;

pub use commands::{COMMANDS, SLURM_OPTIONS, command, man_page, option_reference, unknown_options};
pub use container::{Container, ImageRef, Mount, Volume, VolumeFile};
pub use env::{DEFAULTED, HetGroup, PYTORCH_VARS, TaskEnv, apply_export, task_env};
pub use envvars::{ENV_TABLES, SLURM_ENV, TimeFormat, env_table, read_env, unknown_variables};
pub use filters::{
    SPRIO_DEFAULT, SPRIO_FIELDS, SPRIO_LONG, limit_in, node_in_states, parse_count_range, parse_fields, parse_limit_range,
    parse_node_states, step_selected,
};
pub use formats::{
    ArraySpec, MAX_ARRAY_SIZE, MAX_ARRAY_SIZE_CAP, Signal, format_time, parse_array, parse_begin, parse_dependency, parse_gpus, parse_gres,
    parse_memory, parse_signal, parse_time, signal_number,
};
pub use hostlist::{MAX_HOST_NAME, compress, expand};
pub use limits::{DEFAULT_MAX_SCRIPT_SIZE, SCRIPT_SIZE_CHECK_FROM, body_too_large, script_too_large};
pub use options::{
    BatchSpec, HET_SEPARATOR, MAX_COMPONENTS, PatternAt, STDIN, describe, expand_pattern, expand_pattern_at, parse_batch, parse_sbatch,
    parse_sbatch_env,
};
pub use query::{
    Column, FieldDef, Item, JOB_STATES, Layout, SACCT_BRIEF, SACCT_DEFAULT, SACCT_FIELDS, SACCT_LONG, SINFO_FIELDS, SQUEUE_FIELDS, Unit,
    array_id, field_of, fields_used, header_of, hms, index_ranges, parse_long, parse_percent, parse_sacct_fields, parse_sort, parse_states,
    parse_unit, parse_when, render, sacct_line, sacct_rule, size, squeue_secs, state_code,
};
pub use report::{ReportUnit, UsageJob, Utilization, reservation_usage, reservation_windows, top_users, utilization};
pub use srun::{HetSegment, Input, MAX_CPU_ID, MPI_TYPES, SrunSpec, cpu_bind_cpus, parse_srun, parse_srun_env};
pub use visible::{is_control, json_may_hold_control, visible, visible_text};

/// A user error in a command line, script or value. The message says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl Invalid {
    pub(crate) fn new(msg: impl Into<String>) -> Invalid {
        Invalid(msg.into())
    }
}
