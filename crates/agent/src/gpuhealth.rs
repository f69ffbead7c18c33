//! The built-in GPU health check (beside the site's `health_check_program`): at each health
//! check turn, every GPU of the node is looked at, and a GPU that is failing drains the node
//! with the reason (`sinfo -R`), as NHC's or DCGM's checks would: a critical XID error since the
//! last look, memory pages waiting to be retired (the GPU needs a reset), uncorrected ECC errors
//! since the driver loaded, a temperature at or past the GPU's slowdown threshold, or a device
//! that no longer answers.
//!
//! What a device reports comes through [`GpuProbe`]: NVML's where the driver's library is
//! present ([`Nvml`]), or, for GPUs declared with `--gpus` on a machine without them, a file of
//! injected faults in the agent's data directory ([`Declared`]: how the check is exercised
//! without NVIDIA hardware). The verdict ([`judge`]) is pure.

use std::path::PathBuf;

/// What one GPU reported at one look.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Sample {
    /// Its index on the node.
    pub index: u32,
    /// Critical XID errors since the last look.
    pub xids: Vec<u64>,
    /// Retired memory pages wait for a reset.
    pub pages_pending: bool,
    /// Uncorrected ECC errors since the driver loaded.
    pub ecc_uncorrected: u64,
    /// Temperature and the slowdown threshold, °C, when known.
    pub temperature: Option<(u32, u32)>,
    /// It did not answer, saying this.
    pub lost: Option<String>,
}

/// Where GPUs' reports come from.
pub(crate) trait GpuProbe: Send {
    /// One look at every GPU.
    fn look(&mut self) -> Vec<Sample>;
}

/// The reason to drain the node, if some GPU is failing: each failing GPU's problems, in order.
pub(crate) fn judge(samples: &[Sample]) -> Option<String> {
    let mut out: Vec<String> = Vec::new();
    for s in samples {
        let mut p: Vec<String> = Vec::new();
        if let Some(why) = &s.lost {
            p.push(format!("not answering ({why})"));
        }
        for x in &s.xids {
            p.push(format!("XID {x}{}", xid_meaning(*x).map(|m| format!(" ({m})")).unwrap_or_default()));
        }
        if s.pages_pending {
            p.push("retired pages pending (reset the GPU)".into());
        }
        if s.ecc_uncorrected > 0 {
            p.push(format!("{} uncorrected ECC errors", s.ecc_uncorrected));
        }
        if let Some((t, limit)) = s.temperature
            && t >= limit
        {
            p.push(format!("{t} C (slowdown at {limit} C)"));
        }
        if !p.is_empty() {
            out.push(format!("GPU {}: {}", s.index, p.join(", ")));
        }
    }
    (!out.is_empty()).then(|| format!("GPU check: {}", out.join("; ")))
}

/// What the XIDs operators meet most mean (NVIDIA's XID catalog).
fn xid_meaning(x: u64) -> Option<&'static str> {
    Some(match x {
        13 => "graphics engine exception",
        31 => "GPU memory page fault",
        43 => "GPU stopped processing",
        45 => "preemptive cleanup",
        48 => "double-bit ECC error",
        61 | 62 => "internal micro-controller error",
        63 | 64 => "ECC page retirement or row remapping",
        74 => "NVLink error",
        79 => "fallen off the bus",
        92 => "high single-bit ECC error rate",
        94 => "contained ECC error",
        95 => "uncontained ECC error",
        119 | 120 => "GSP error",
        _ => return None,
    })
}

/// NVML's reports. The event set that gathers critical XID errors lives as long as the agent.
pub(crate) struct Nvml {
    nvml: &'static nvml_wrapper::Nvml,
    events: Option<nvml_wrapper::EventSet<'static>>,
    count: u32,
}

impl Nvml {
    /// NVML, when the driver's library is present and reports GPUs.
    pub(crate) fn open() -> Option<Nvml> {
        let nvml: &'static nvml_wrapper::Nvml = Box::leak(Box::new(nvml_wrapper::Nvml::init().ok()?));
        let count = nvml.device_count().ok().filter(|n| *n > 0)?;
        let mut events = nvml.create_event_set().ok();
        for i in 0..count {
            if let (Some(set), Ok(d)) = (events.take(), nvml.device_by_index(i)) {
                events = d.register_events(nvml_wrapper::bitmasks::event::EventTypes::CRITICAL_XID_ERROR, set).ok();
            }
        }
        Some(Nvml { nvml, events, count })
    }
}

impl GpuProbe for Nvml {
    fn look(&mut self) -> Vec<Sample> {
        use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, TemperatureSensor, TemperatureThreshold};
        let mut out: Vec<Sample> = (0..self.count).map(|index| Sample { index, ..Sample::default() }).collect();
        // XIDs since the last look: drain the event set without waiting.
        if let Some(set) = &self.events {
            for _ in 0..1024 {
                let Ok(e) = set.wait(0) else { break };
                let idx = e.device.index().unwrap_or(0).min(self.count.saturating_sub(1));
                if let Some(nvml_wrapper::enums::event::XidError::Value(x)) = e.event_data
                    && let Some(s) = out.get_mut(idx as usize)
                {
                    s.xids.push(x);
                }
            }
        }
        for s in &mut out {
            let d = match self.nvml.device_by_index(s.index) {
                Ok(d) => d,
                Err(e) => {
                    s.lost = Some(e.to_string());
                    continue;
                }
            };
            match d.temperature(TemperatureSensor::Gpu) {
                Ok(t) => s.temperature = d.temperature_threshold(TemperatureThreshold::Slowdown).ok().map(|l| (t, l)),
                Err(nvml_wrapper::error::NvmlError::GpuLost) => s.lost = Some("GPU is lost".into()),
                Err(_) => {}
            }
            s.pages_pending = d.are_pages_pending_retired().unwrap_or(false);
            s.ecc_uncorrected = d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile).unwrap_or(0);
        }
        out
    }
}

/// GPUs declared with `--gpus` (no NVML): each look reads the faults injected in `file`, one per
/// line (`GPU xid N`, `GPU pages`, `GPU ecc N`, `GPU temp T LIMIT`, `GPU lost`), and empties it;
/// an XID is reported once, the other faults while they are in the file.
pub(crate) struct Declared {
    pub count: u32,
    pub file: PathBuf,
}

impl GpuProbe for Declared {
    fn look(&mut self) -> Vec<Sample> {
        let mut out: Vec<Sample> = (0..self.count).map(|index| Sample { index, ..Sample::default() }).collect();
        let text = std::fs::read_to_string(&self.file).unwrap_or_default();
        let mut keep = Vec::new();
        for line in text.lines().take(1000) {
            let w: Vec<&str> = line.split_whitespace().collect();
            let Some(s) = w.first().and_then(|g| g.parse::<u32>().ok()).and_then(|g| out.get_mut(g as usize)) else { continue };
            let num = |k: usize| w.get(k).and_then(|v| v.parse::<u64>().ok());
            match w.get(1).copied() {
                Some("xid") => s.xids.extend(num(2)),
                Some("pages") => {
                    s.pages_pending = true;
                    keep.push(line);
                }
                Some("ecc") => {
                    s.ecc_uncorrected = num(2).unwrap_or(1);
                    keep.push(line);
                }
                Some("temp") => {
                    s.temperature = num(2).zip(num(3)).map(|(t, l)| (t as u32, l as u32));
                    keep.push(line);
                }
                Some("lost") => {
                    s.lost = Some("injected".into());
                    keep.push(line);
                }
                _ => {}
            }
        }
        if !text.is_empty() {
            let rest: String = keep.iter().map(|l| format!("{l}\n")).collect();
            let _ = std::fs::write(&self.file, rest);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_gpu_drains_with_what_is_wrong_and_healthy_ones_say_nothing() {
        let ok = Sample { index: 0, temperature: Some((60, 90)), ..Sample::default() };
        assert_eq!(judge(std::slice::from_ref(&ok)), None);
        let bad = Sample { index: 1, xids: vec![79], ecc_uncorrected: 2, temperature: Some((95, 90)), ..Sample::default() };
        assert_eq!(
            judge(&[ok.clone(), bad]).as_deref(),
            Some("GPU check: GPU 1: XID 79 (fallen off the bus), 2 uncorrected ECC errors, 95 C (slowdown at 90 C)")
        );
        let lost = Sample { index: 2, lost: Some("GPU is lost".into()), pages_pending: true, ..Sample::default() };
        assert_eq!(judge(&[lost]).as_deref(), Some("GPU check: GPU 2: not answering (GPU is lost), retired pages pending (reset the GPU)"));
    }

    #[test]
    fn declared_gpus_report_injected_faults_xids_once() {
        let dir = std::env::temp_dir().join(format!("tandem-gpuhealth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("gpu-faults");
        let mut p = Declared { count: 2, file: file.clone() };
        assert_eq!(judge(&p.look()), None, "no file: healthy");
        std::fs::write(&file, "1 xid 79\n0 temp 99 90\n7 xid 13\nnonsense\n").unwrap();
        let first = p.look();
        assert_eq!(first[1].xids, vec![79]);
        assert_eq!(first[0].temperature, Some((99, 90)));
        let again = p.look();
        assert!(again[1].xids.is_empty(), "an XID is reported once");
        assert_eq!(again[0].temperature, Some((99, 90)), "a lasting fault stays while it is in the file");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
