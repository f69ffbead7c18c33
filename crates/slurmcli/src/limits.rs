//! Size limits a submission must keep, with the words that refuse it: the batch script's
//! size (`max_script_size`, Slurm's `SchedulerParameters=max_script_size`), checked by the
//! client before it sends and by the controller.

/// Slurm's default largest batch script: 4 MB (4194304 bytes).
pub const DEFAULT_MAX_SCRIPT_SIZE: u64 = 4 << 20;

/// Scripts larger than this make `sbatch` ask the controller for its `max_script_size` before
/// sending (a smaller one costs no extra request; the controller's refusal still stands).
pub const SCRIPT_SIZE_CHECK_FROM: u64 = 1 << 20;

/// The refusal of a `size`-byte batch script over `limit`, naming the setting.
pub fn script_too_large(size: u64, limit: u64) -> String {
    format!(
        "the batch script is {size} bytes, over the limit of {limit} bytes (max_script_size in the controller's tandem.toml; Slurm's \
         SchedulerParameters=max_script_size)"
    )
}

/// The refusal of a request body over `limit` bytes, as the controller reads it (a script
/// under `max_script_size` whose JSON encoding, with control bytes written `\u0001`, grew past
/// the body limit, or a very large environment).
pub fn body_too_large(limit: u64, max_script_size: u64) -> String {
    format!(
        "the request body is over the controller's limit of {limit} bytes (twice max_script_size, {max_script_size} bytes, and 1 MiB: a \
         batch script's control bytes take 6 bytes each once encoded)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_size_the_limit_and_the_setting() {
        let m = script_too_large(5 << 20, DEFAULT_MAX_SCRIPT_SIZE);
        assert!(m.contains("5242880") && m.contains("4194304") && m.contains("max_script_size"), "{m}");
        let m = body_too_large(9 << 20, DEFAULT_MAX_SCRIPT_SIZE);
        assert!(m.contains(&(9u64 << 20).to_string()) && m.contains("max_script_size"), "{m}");
    }
}
