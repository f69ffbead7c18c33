//! What this node has: GPUs from NVML (loaded at run time, not linked) and the machine's memory.

/// GPUs as NVML reports them (count and model, e.g. `h200`), when the NVIDIA driver's library
/// is present; `None` otherwise (the library is loaded at run time, not linked).
pub(crate) fn nvml_gpus() -> Option<(Option<String>, u32)> {
    let nvml = nvml_wrapper::Nvml::init().ok()?;
    let n = nvml.device_count().ok()?;
    if n == 0 {
        return None;
    }
    let name = nvml.device_by_index(0).ok().and_then(|d| d.name().ok());
    Some((name.map(|n| gpu_model(&n)), n))
}

/// `NVIDIA H200` → `h200`, `NVIDIA A100-SXM4-80GB` → `a100`, `Tesla V100-SXM2-32GB` → `v100`.
fn gpu_model(name: &str) -> String {
    let last = name.split_whitespace().find(|w| !w.eq_ignore_ascii_case("nvidia") && !w.eq_ignore_ascii_case("tesla")).unwrap_or(name);
    last.split('-').next().unwrap_or(last).to_ascii_lowercase()
}

pub(crate) fn machine_memory() -> u64 {
    let m = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    m.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(1 << 30, |kb| kb << 10)
}

#[cfg(test)]
mod tests {
    #[test]
    fn gpu_models() {
        assert_eq!(super::gpu_model("NVIDIA H200"), "h200");
        assert_eq!(super::gpu_model("NVIDIA A100-SXM4-80GB"), "a100");
        assert_eq!(super::gpu_model("Tesla V100-SXM2-32GB"), "v100");
    }
}
