//! Inference services: the spec a user applies (`tandem service apply -f`), its validation, the
//! service record the controller keeps, and the pure pieces of reconciliation: rolling-update
//! arithmetic, which replicas to remove first, and the autoscaler.
//!
//! The spec is plain serde data with `deny_unknown_fields`, so the same struct reads TOML, YAML
//! and JSON (the caller parses the text); [`ServiceSpec::resolve`] turns it into checked values
//! with Kubernetes' defaults filled in, or a message that says what is wrong.

use model::{ReplicaState, Time};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// A number or a string with a unit (`10`, `"10s"`, `"256MiB"`, `"25%"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Quantity {
    /// A bare number.
    Num(f64),
    /// A number with a unit.
    Text(String),
}

/// Resources per replica.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourcesSpec {
    /// CPUs (default 1).
    pub cpus: Option<Quantity>,
    /// Memory: `"256MiB"`, `"1G"`, `"512Mi"`; a bare number is MiB (as Slurm's `--mem`).
    pub memory: Option<Quantity>,
    /// GPUs (default 0).
    pub gpus: Option<Quantity>,
    /// GPU model (`h100`), or any.
    pub gpu_type: Option<String>,
}

/// A health probe: an HTTP GET of a path (2xx/3xx passes) or a TCP connect, on the replica's port.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeSpec {
    /// HTTP path to GET.
    pub http: Option<String>,
    /// TCP connect.
    pub tcp: Option<bool>,
    /// Port (default: the replica's `$PORT`).
    pub port: Option<Quantity>,
    /// Seconds between probes (default 10).
    pub period: Option<Quantity>,
    /// Seconds before a probe counts as failed (default 1).
    pub timeout: Option<Quantity>,
    /// Consecutive failures that count (default 3).
    pub failure_threshold: Option<Quantity>,
    /// Consecutive successes that count (default 1).
    pub success_threshold: Option<Quantity>,
    /// Seconds after start before the first probe (default 0).
    pub initial_delay: Option<Quantity>,
}

/// Autoscaling on in-flight requests per replica.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoscaleSpec {
    /// Fewest replicas (default 1; 0 allows scale-to-zero).
    pub min: Option<Quantity>,
    /// Most replicas.
    pub max: Option<Quantity>,
    /// Target in-flight requests per replica.
    pub target_inflight: Option<Quantity>,
    /// Scale down only to the highest recommendation of this window (default 300 s, as the
    /// Kubernetes autoscaler's stabilisation window).
    pub scale_down_window: Option<Quantity>,
}

/// Rolling update limits.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollingSpec {
    /// Replicas above the desired count during an update (count or `"25%"`, default 25%).
    pub max_surge: Option<Quantity>,
    /// Replicas below the desired count that may be unavailable (default 25%).
    pub max_unavailable: Option<Quantity>,
}

/// How the proxy treats the service.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxySpec {
    /// `round_robin` (default), `least_request`, `p2c` or `llm` (cache- and load-aware, for
    /// OpenAI-compatible LLM servers: `balance::Policy::Llm`).
    pub balance: Option<String>,
    /// Retries of a request that failed before any byte reached the client (default 2).
    pub retries: Option<Quantity>,
    /// How long a request waits for a replica when there is none (scale from zero; default 60 s).
    pub hold: Option<Quantity>,
    /// A streaming OpenAI completion whose replica fails mid-stream goes on on another replica,
    /// in the same stream to the client (default false; each resume is one of `retries`).
    pub resume_streams: Option<bool>,
    /// Requests in flight per replica (`balance = "llm"` only); more wait in the proxy's fair
    /// queue. Not given: no limit and no queue.
    pub max_concurrency: Option<Quantity>,
    /// The bound on a request's wait in the fair queue (default 10 s): one expected to wait
    /// longer gets 429 with `Retry-After`. Needs `max_concurrency`.
    pub max_wait: Option<Quantity>,
    /// A request header whose value names the request's tenant (one of `tenants`), when no API
    /// key does. Needs `max_concurrency`.
    pub tenant_header: Option<String>,
    /// Tenants of the fair queue by name: a weight and the API keys (`Authorization: Bearer
    /// KEY`) that identify them. Requests of no tenant are the `default` tenant's.
    #[serde(default)]
    pub tenants: BTreeMap<String, TenantSpec>,
    /// Streamed requests per replica that may await their first token before the proxy sends
    /// that replica another queued one (default 1: queued prompts reach a replica one prefill
    /// at a time; 0: not paced, a freed batch takes as many as it has room for at once).
    /// Needs `max_concurrency`.
    pub prefill_pace: Option<Quantity>,
}

/// One tenant of a service's fair queue, as the user writes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    /// Share of the service relative to the other tenants' (default 1).
    pub weight: Option<Quantity>,
    /// API keys of the tenant.
    #[serde(default)]
    pub keys: Vec<String>,
}

/// A checked tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenant {
    /// Name.
    pub name: String,
    /// Weight, at least 1.
    pub weight: u32,
    /// API keys.
    pub keys: Vec<String>,
}

/// Default bound on a request's wait in the proxy's fair queue, milliseconds.
pub const DEFAULT_MAX_WAIT_MS: u64 = 10_000;
/// Largest per-replica concurrency limit.
pub const MAX_CONCURRENCY: u32 = 100_000;
/// Most tenants a service may name.
pub const MAX_TENANTS: usize = 1000;
/// Default `[proxy] prefill_pace`.
pub const DEFAULT_PREFILL_PACE: u32 = 1;

/// Checks the fair-queue settings of `[proxy]`: (max_concurrency (0: none), max_wait_ms,
/// tenant_header, tenants).
fn fair_settings(p: &ProxySpec, balance: &str) -> Result<(u32, u64, Option<String>, Vec<Tenant>), String> {
    let limit = count(&p.max_concurrency, "proxy.max_concurrency", 0, 1, MAX_CONCURRENCY)?;
    if limit == 0 {
        let given = [
            (p.max_wait.is_some(), "max_wait"),
            (p.tenant_header.is_some(), "tenant_header"),
            (!p.tenants.is_empty(), "tenants"),
            (p.prefill_pace.is_some(), "prefill_pace"),
        ];
        if let Some((_, what)) = given.iter().find(|(g, _)| *g) {
            return Err(format!("proxy.{what} needs proxy.max_concurrency (without a per-replica limit nothing waits in the proxy)"));
        }
        return Ok((0, DEFAULT_MAX_WAIT_MS, None, Vec::new()));
    }
    if balance != "llm" {
        return Err(format!(
            "proxy.max_concurrency needs balance = \"llm\" (the limit and the fair queue belong to the LLM balancer), got balance = {balance:?}"
        ));
    }
    let max_wait_ms = duration(&p.max_wait, "proxy.max_wait", DEFAULT_MAX_WAIT_MS, 10, 600_000)?;
    if let Some(h) = &p.tenant_header {
        let token = !h.is_empty() && h.len() <= 64 && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !token {
            return Err(format!("proxy.tenant_header must be a header name (letters, digits, '-', '_'; at most 64), got {h:?}"));
        }
        if ["authorization", "host", "content-length", "content-type", "transfer-encoding", "connection"]
            .contains(&h.to_ascii_lowercase().as_str())
        {
            return Err(format!("proxy.tenant_header cannot be {h:?} (a header with another meaning)"));
        }
    }
    if p.tenants.len() > MAX_TENANTS {
        return Err(format!("proxy.tenants: at most {MAX_TENANTS} tenants, got {}", p.tenants.len()));
    }
    let mut tenants = Vec::new();
    let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
    for (name, t) in &p.tenants {
        let ok =
            !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
        if !ok {
            return Err(format!("proxy.tenants: tenant name {name:?} must be 1 to 64 letters, digits, '-', '_' or '.'"));
        }
        let weight = count(&t.weight, &format!("proxy.tenants.{name}.weight"), 1, 1, 1000)?;
        for (i, k) in t.keys.iter().enumerate() {
            // The key itself is never echoed back: errors name its tenant and position.
            if k.is_empty() || k.len() > 256 || !k.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(format!("proxy.tenants.{name}.keys[{i}] must be 1 to 256 visible ASCII characters without spaces"));
            }
            if let Some(other) = owner.insert(k, name) {
                return Err(format!("proxy.tenants.{name}.keys[{i}] is also a key of tenant {other:?} (a key names one tenant)"));
            }
        }
        tenants.push(Tenant { name: name.clone(), weight, keys: t.keys.clone() });
    }
    Ok((limit, max_wait_ms, p.tenant_header.as_ref().map(|h| h.to_ascii_lowercase()), tenants))
}

/// A service as the user writes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    /// Name: a DNS label (lower-case letters, digits, `-`), routed as `/s/NAME/` and `Host: NAME`.
    pub name: String,
    /// Program and arguments; `$PORT` is replaced by the replica's port.
    pub command: Vec<String>,
    /// More arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory (default: where it was applied from).
    pub workdir: Option<String>,
    /// Replica output file pattern, relative to the working directory (`%x` service, `%j`
    /// replica id); default `tandem-%x-%j.log`.
    pub output: Option<String>,
    /// Resources per replica.
    #[serde(default)]
    pub resources: ResourcesSpec,
    /// Replica count (give this or `[autoscale]`).
    pub replicas: Option<Quantity>,
    /// Autoscaling.
    pub autoscale: Option<AutoscaleSpec>,
    /// QOS: priority and preemption tier, the same scale batch jobs use.
    pub qos: Option<String>,
    /// Partition.
    pub partition: Option<String>,
    /// Account.
    pub account: Option<String>,
    /// Readiness probe: only ready replicas get traffic.
    pub readiness: Option<ProbeSpec>,
    /// Liveness probe: a replica failing it is restarted.
    pub liveness: Option<ProbeSpec>,
    /// Startup probe: liveness and readiness wait until it passes.
    pub startup: Option<ProbeSpec>,
    /// Rolling update limits.
    #[serde(default)]
    pub rolling_update: RollingSpec,
    /// Replicas that must stay ready during voluntary disruption (count or percentage).
    pub min_available: Option<Quantity>,
    /// Proxy settings.
    #[serde(default)]
    pub proxy: ProxySpec,
    /// Seconds between SIGTERM and SIGKILL when a replica stops (default 30).
    pub termination_grace: Option<Quantity>,
    /// The OCI image the replicas run in (`--container-image`'s forms; README, Containers);
    /// none: a bare process.
    #[serde(default)]
    pub image: Option<String>,
    /// Host paths bound into the image, `SRC:DST[:ro]` (`--container-mounts`' entries); a
    /// relative SRC is from the working directory.
    #[serde(default)]
    pub mounts: Vec<String>,
    /// Files mounted read-only into the image (a Deployment's ConfigMap and Secret volumes,
    /// their contents copied in when it is written).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<slurmcli::Volume>,
    /// A restart marker: a new value (a time, say) makes a new revision whose replicas replace
    /// the running ones with nothing else changed (`kubectl rollout restart` sets it, from the
    /// template's `kubectl.kubernetes.io/restartedAt` annotation).
    #[serde(default)]
    pub restarted_at: Option<String>,
}

impl ServiceSpec {
    /// The replicas' container, if the service has an image; relative mount sources are taken
    /// from `dir`.
    pub fn container(&self, dir: &str) -> Result<Option<slurmcli::Container>, String> {
        let Some(image) = &self.image else {
            if !self.mounts.is_empty() {
                return Err("mounts need an image".into());
            }
            if !self.volumes.is_empty() {
                return Err("volumes need an image: a bare process sees the node's own files".into());
            }
            return Ok(None);
        };
        slurmcli::ImageRef::parse(image).map_err(|e| format!("image: {}", e.0))?;
        let mut mounts = Vec::new();
        for m in &self.mounts {
            if m.contains(',') {
                return Err(format!("mounts: one SRC:DST[:ro] per entry, got {m:?}"));
            }
            mounts.extend(slurmcli::container::parse_mounts(m).map_err(|e| format!("mounts: {}", e.0))?);
        }
        let mut c = slurmcli::Container { image: image.clone(), mounts, volumes: self.volumes.clone(), ..Default::default() };
        c.resolve(dir);
        c.check().map_err(|e| e.0)?;
        Ok(Some(c))
    }
}

/// A count or a percentage of the desired replicas.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Portion {
    /// A count.
    Count(u32),
    /// A percentage, 0 to 100.
    Percent(u32),
}

impl Portion {
    /// The count for `of` replicas, rounding up (surge) or down (unavailable).
    pub fn of(self, of: u32, round_up: bool) -> u32 {
        match self {
            Portion::Count(n) => n,
            Portion::Percent(p) => {
                let x = of as u64 * p as u64;
                (if round_up { x.div_ceil(100) } else { x / 100 }) as u32
            }
        }
    }
}

/// How a probe checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProbeKind {
    /// HTTP GET of this path.
    Http(String),
    /// TCP connect.
    Tcp,
}

/// A checked probe, times in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// What it checks.
    pub kind: ProbeKind,
    /// Port, when not the replica's own.
    pub port: Option<u16>,
    /// Period.
    pub period_ms: u64,
    /// Timeout.
    pub timeout_ms: u64,
    /// Consecutive failures that count.
    pub failure_threshold: u32,
    /// Consecutive successes that count.
    pub success_threshold: u32,
    /// Delay before the first probe.
    pub initial_delay_ms: u64,
}

/// Checked autoscaling settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Autoscale {
    /// Fewest replicas (0: scale to zero).
    pub min: u32,
    /// Most replicas.
    pub max: u32,
    /// Target in-flight requests per replica.
    pub target: f64,
    /// Scale-down stabilisation window, milliseconds.
    pub window_ms: i64,
}

/// A spec with every value checked and every default filled in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resolved {
    /// Replicas at creation (fixed count, or the autoscaler's minimum, at least 1 then).
    pub replicas: u32,
    /// Autoscaling.
    pub autoscale: Option<Autoscale>,
    /// CPUs per replica.
    pub cpus: u32,
    /// Memory per replica, bytes (0: none asked).
    pub memory: u64,
    /// GPUs per replica.
    pub gpus: u32,
    /// GPU model.
    pub gpu_type: Option<String>,
    /// Readiness probe.
    pub readiness: Option<Probe>,
    /// Liveness probe.
    pub liveness: Option<Probe>,
    /// Startup probe.
    pub startup: Option<Probe>,
    /// Max surge.
    pub surge: Portion,
    /// Max unavailable.
    pub unavailable: Portion,
    /// Min available under voluntary disruption.
    pub min_available: Option<Portion>,
    /// Balancing policy.
    pub balance: String,
    /// Proxy retries.
    pub retries: u32,
    /// Proxy hold time, milliseconds.
    pub hold_ms: u64,
    /// Streams resumed on another replica.
    pub resume_streams: bool,
    /// Requests in flight per replica before the proxy queues them (0: no limit, no queue).
    pub max_concurrency: u32,
    /// Bound on a request's wait in the proxy's fair queue, milliseconds.
    pub max_wait_ms: u64,
    /// Header naming a request's tenant (lower case).
    pub tenant_header: Option<String>,
    /// Tenants of the fair queue.
    pub tenants: Vec<Tenant>,
    /// Streamed requests per replica awaiting their first token before the proxy sends it
    /// another (0: not paced; meaningful with `max_concurrency` only).
    pub prefill_pace: u32,
    /// SIGTERM-to-SIGKILL time, milliseconds.
    pub grace_ms: u64,
    /// Output pattern.
    pub output: String,
}

/// Most replicas a service may ask for.
pub const MAX_REPLICAS: u32 = 1000;

fn num(q: &Quantity, what: &str) -> Result<f64, String> {
    match q {
        Quantity::Num(n) if n.is_finite() => Ok(*n),
        Quantity::Num(_) => Err(format!("{what} must be a finite number")),
        Quantity::Text(s) => s.trim().parse::<f64>().map_err(|_| format!("{what} must be a number, got {s:?}")),
    }
}

fn count(q: &Option<Quantity>, what: &str, default: u32, min: u32, max: u32) -> Result<u32, String> {
    let Some(q) = q else { return Ok(default) };
    let n = num(q, what)?;
    if n.fract() != 0.0 {
        return Err(format!("{what} must be a whole number, got {n}"));
    }
    if n < min as f64 || n > max as f64 {
        return Err(format!("{what} must be between {min} and {max}, got {n}"));
    }
    Ok(n as u32)
}

/// Parses a duration: `"10s"`, `"500ms"`, `"2m"`, `"1h"`, or a bare number of seconds.
pub fn parse_duration_ms(q: &Quantity, what: &str) -> Result<u64, String> {
    let ms = match q {
        Quantity::Num(n) => {
            if !n.is_finite() || *n < 0.0 {
                return Err(format!("{what} must be a duration of 0 or more, got {n}"));
            }
            n * 1000.0
        }
        Quantity::Text(s) => {
            let t = s.trim();
            let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
            let (v, unit) = t.split_at(split);
            let v: f64 = v.parse().map_err(|_| format!("{what} must be a duration like \"10s\" or \"500ms\", got {s:?}"))?;
            let scale = match unit.trim() {
                "ms" => 1.0,
                "" | "s" => 1000.0,
                "m" | "min" => 60_000.0,
                "h" => 3_600_000.0,
                u => return Err(format!("{what}: unknown unit {u:?} in {s:?} (use ms, s, m or h)")),
            };
            v * scale
        }
    };
    if ms > 7.0 * 86_400_000.0 {
        return Err(format!("{what} is longer than a week"));
    }
    Ok(ms.round() as u64)
}

fn duration(q: &Option<Quantity>, what: &str, default_ms: u64, min_ms: u64, max_ms: u64) -> Result<u64, String> {
    let Some(q) = q else { return Ok(default_ms) };
    let ms = parse_duration_ms(q, what)?;
    if ms < min_ms || ms > max_ms {
        return Err(format!("{what} must be between {} ms and {} s, got {ms} ms", min_ms, max_ms / 1000));
    }
    Ok(ms)
}

/// Parses memory: `"256MiB"`, `"256Mi"`, `"256M"`, `"1G"`, `"1.5GiB"`, `"1024K"`, `"100B"`; a bare
/// number is MiB.
pub fn parse_memory(q: &Quantity) -> Result<u64, String> {
    let (v, unit) = match q {
        Quantity::Num(n) => (*n, "M".to_string()),
        Quantity::Text(s) => {
            let t = s.trim();
            let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
            let (v, u) = t.split_at(split);
            (v.parse::<f64>().map_err(|_| format!("memory must look like \"256MiB\" or \"1G\", got {s:?}"))?, u.trim().to_string())
        }
    };
    if !v.is_finite() || v < 0.0 {
        return Err(format!("memory must be 0 or more, got {v}"));
    }
    let u = unit.trim_end_matches('B').trim_end_matches('i');
    let scale: f64 = match u.to_ascii_uppercase().as_str() {
        "" if unit.ends_with('B') => 1.0,
        "" => (1u64 << 20) as f64,
        "K" => 1024.0,
        "M" => (1u64 << 20) as f64,
        "G" => (1u64 << 30) as f64,
        "T" => (1u64 << 40) as f64,
        _ => return Err(format!("memory: unknown unit {unit:?} (use K, M, G or T, with or without iB)")),
    };
    let b = v * scale;
    if b > (1u64 << 50) as f64 {
        return Err("memory is larger than a petabyte".into());
    }
    Ok(b as u64)
}

fn portion(q: &Option<Quantity>, what: &str, default: Portion) -> Result<Portion, String> {
    match q {
        None => Ok(default),
        Some(Quantity::Text(s)) if s.trim().ends_with('%') => {
            let v: u32 =
                s.trim().trim_end_matches('%').trim().parse().map_err(|_| format!("{what} must be a count or a percentage, got {s:?}"))?;
            if v > 100 {
                return Err(format!("{what} must be at most 100%, got {s}"));
            }
            Ok(Portion::Percent(v))
        }
        Some(_) => Ok(Portion::Count(count(q, what, 0, 0, MAX_REPLICAS)?)),
    }
}

fn probe(p: &Option<ProbeSpec>, what: &str, liveness: bool) -> Result<Option<Probe>, String> {
    let Some(p) = p else { return Ok(None) };
    let kind = match (&p.http, p.tcp) {
        (Some(path), None | Some(false)) => {
            if !path.starts_with('/') || path.len() > 1024 || path.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(format!("{what}: http must be a path starting with '/', without spaces, got {path:?}"));
            }
            ProbeKind::Http(path.clone())
        }
        (None, Some(true)) => ProbeKind::Tcp,
        (Some(_), Some(true)) => return Err(format!("{what}: give either http or tcp, not both")),
        (None, _) => return Err(format!("{what}: give http = \"/path\" or tcp = true")),
    };
    let port = match &p.port {
        None => None,
        Some(_) => Some(count(&p.port, &format!("{what}.port"), 0, 1, 65535)? as u16),
    };
    let period_ms = duration(&p.period, &format!("{what}.period"), 10_000, 100, 3_600_000)?;
    let timeout_ms = duration(&p.timeout, &format!("{what}.timeout"), 1_000, 50, 600_000)?;
    let failure_threshold = count(&p.failure_threshold, &format!("{what}.failure_threshold"), 3, 1, 100)?;
    let success_threshold = count(&p.success_threshold, &format!("{what}.success_threshold"), 1, 1, 100)?;
    if liveness && success_threshold != 1 {
        return Err(format!("{what}.success_threshold must be 1 (as Kubernetes requires for liveness and startup probes)"));
    }
    let initial_delay_ms = duration(&p.initial_delay, &format!("{what}.initial_delay"), 0, 0, 3_600_000)?;
    Ok(Some(Probe { kind, port, period_ms, timeout_ms, failure_threshold, success_threshold, initial_delay_ms }))
}

/// The Kubernetes namespace of every service whose name has none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Whether `name` is a DNS label (1 to 63 lower-case letters, digits and '-', not starting or
/// ending with '-').
pub fn dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// Whether `name` can name a service: a DNS label (what Kubernetes requires of a Deployment's
/// name Tandem serves), or `NAME.NAMESPACE`, a service in a Kubernetes namespace other than
/// `default` ([`split_name`]).
pub fn valid_name(name: &str) -> bool {
    // At most 63 in all: the name is a label's value (`tandem.dev/service`).
    match name.split_once('.') {
        Some((n, ns)) => dns_label(n) && dns_label(ns) && ns != DEFAULT_NAMESPACE && name.len() <= 63,
        None => dns_label(name),
    }
}

/// The Kubernetes namespace and name of service `service`: `web` is `web` in `default`, and
/// `web.team-a` is `web` in the namespace `team-a`, as Kubernetes' DNS names a Service of a
/// namespace (so the proxy's `/s/web.team-a/` and `Host: web.team-a` reach it).
pub fn split_name(service: &str) -> (&str, &str) {
    match service.split_once('.') {
        Some((name, ns)) => (ns, name),
        None => (DEFAULT_NAMESPACE, service),
    }
}

/// The service that is the Deployment `name` of `namespace` ([`split_name`]'s inverse).
pub fn join_name(namespace: &str, name: &str) -> String {
    if namespace == DEFAULT_NAMESPACE || namespace.is_empty() { name.to_string() } else { format!("{name}.{namespace}") }
}

impl ServiceSpec {
    /// Checks every value and fills in the defaults; the error says what is wrong.
    pub fn resolve(&self) -> Result<Resolved, String> {
        if !valid_name(&self.name) {
            return Err(format!(
                "invalid service name {:?}: use 1 to 63 lower-case letters, digits and '-', not starting or ending with '-' \
                 (NAME.NAMESPACE, each such and 63 in all, for a service in a Kubernetes namespace other than default)",
                self.name
            ));
        }
        if self.command.is_empty() || self.command[0].trim().is_empty() {
            return Err("command must name a program to run".into());
        }
        if self.command.iter().chain(&self.args).any(|a| a.contains('\0')) {
            return Err("command and args must not contain NUL bytes".into());
        }
        for (k, v) in &self.env {
            let ok =
                !k.is_empty() && !k.starts_with(|c: char| c.is_ascii_digit()) && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !ok || v.contains('\0') {
                return Err(format!("invalid environment variable name {k:?}"));
            }
            if k == "PORT" {
                return Err("env: PORT is set by Tandem to the replica's port".into());
            }
        }
        if let Some(w) = &self.workdir
            && !w.starts_with('/')
        {
            return Err(format!("workdir must be an absolute path, got {w:?}"));
        }
        self.container("/")?;
        let output = self.output.clone().unwrap_or_else(|| "tandem-%x-%j.log".into());
        if output.is_empty() || output.contains('\0') || output.split('/').any(|c| c == "..") {
            return Err(format!("output must be a file name pattern without '..', got {output:?}"));
        }
        let autoscale = match &self.autoscale {
            None => None,
            Some(a) => {
                if self.replicas.is_some() {
                    return Err("give either replicas or [autoscale], not both".into());
                }
                let min = count(&a.min, "autoscale.min", 1, 0, MAX_REPLICAS)?;
                let max = count(&a.max, "autoscale.max", min.max(1), 1, MAX_REPLICAS)?;
                if a.max.is_none() {
                    return Err("autoscale.max is required".into());
                }
                if min > max {
                    return Err(format!("autoscale.min ({min}) is above autoscale.max ({max})"));
                }
                let target = match &a.target_inflight {
                    None => return Err("autoscale.target_inflight is required (in-flight requests per replica)".into()),
                    Some(q) => num(q, "autoscale.target_inflight")?,
                };
                if !(target > 0.0 && target <= 1e6) {
                    return Err(format!("autoscale.target_inflight must be above 0, got {target}"));
                }
                let window_ms = duration(&a.scale_down_window, "autoscale.scale_down_window", 300_000, 0, 3_600_000)? as i64;
                Some(Autoscale { min, max, target, window_ms })
            }
        };
        let replicas = match (&self.replicas, &autoscale) {
            (Some(q), _) => {
                let n = num(q, "replicas")?;
                if n < 0.0 {
                    return Err(format!("replicas must be 0 or more, got {n}"));
                }
                count(&self.replicas, "replicas", 1, 0, MAX_REPLICAS)?
            }
            (None, Some(a)) => a.min.max(1),
            (None, None) => 1,
        };
        let cpus = count(&self.resources.cpus, "resources.cpus", 1, 1, 4096)?;
        let memory = match &self.resources.memory {
            None => 0,
            Some(q) => parse_memory(q).map_err(|e| format!("resources.{e}"))?,
        };
        let gpus = count(&self.resources.gpus, "resources.gpus", 0, 0, 64)?;
        if let Some(t) = &self.resources.gpu_type
            && (t.is_empty() || !t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
        {
            return Err(format!("resources.gpu_type must be a model name like \"h100\", got {t:?}"));
        }
        let readiness = probe(&self.readiness, "readiness", false)?;
        let liveness = probe(&self.liveness, "liveness", true)?;
        let startup = probe(&self.startup, "startup", true)?;
        let surge = portion(&self.rolling_update.max_surge, "rolling_update.max_surge", Portion::Percent(25))?;
        let unavailable = portion(&self.rolling_update.max_unavailable, "rolling_update.max_unavailable", Portion::Percent(25))?;
        if matches!(surge, Portion::Count(0) | Portion::Percent(0)) && matches!(unavailable, Portion::Count(0) | Portion::Percent(0)) {
            return Err("rolling_update: max_surge and max_unavailable cannot both be 0".into());
        }
        let min_available = match &self.min_available {
            None => None,
            Some(_) => Some(portion(&self.min_available, "min_available", Portion::Count(0))?),
        };
        let balance = self.proxy.balance.clone().unwrap_or_else(|| "round_robin".into());
        if !["round_robin", "least_request", "p2c", "llm"].contains(&balance.as_str()) {
            return Err(format!("proxy.balance must be round_robin, least_request, p2c or llm, got {balance:?}"));
        }
        let retries = count(&self.proxy.retries, "proxy.retries", 2, 0, 10)?;
        let hold_ms = duration(&self.proxy.hold, "proxy.hold", 60_000, 0, 600_000)?;
        let resume_streams = self.proxy.resume_streams.unwrap_or(false);
        if resume_streams && retries == 0 {
            return Err("proxy.resume_streams needs proxy.retries of at least 1 (each resume is a retry)".into());
        }
        let (max_concurrency, max_wait_ms, tenant_header, tenants) = fair_settings(&self.proxy, &balance)?;
        let prefill_pace = count(&self.proxy.prefill_pace, "proxy.prefill_pace", DEFAULT_PREFILL_PACE, 0, MAX_CONCURRENCY)?;
        let grace_ms = duration(&self.termination_grace, "termination_grace", 30_000, 0, 3_600_000)?;
        if let Some(q) = &self.qos
            && q.is_empty()
        {
            return Err("qos must not be empty".into());
        }
        Ok(Resolved {
            replicas,
            autoscale,
            cpus,
            memory,
            gpus,
            gpu_type: self.resources.gpu_type.clone(),
            readiness,
            liveness,
            startup,
            surge,
            unavailable,
            min_available,
            balance,
            retries,
            hold_ms,
            resume_streams,
            max_concurrency,
            max_wait_ms,
            tenant_header,
            tenants,
            prefill_pace,
            grace_ms,
            output,
        })
    }

    /// Whether two specs differ in what the replicas run (a new revision), as opposed to only
    /// the count or the autoscaling bounds.
    pub fn template_differs(&self, other: &ServiceSpec) -> bool {
        let strip = |s: &ServiceSpec| ServiceSpec {
            replicas: None,
            autoscale: None,
            rolling_update: RollingSpec::default(),
            min_available: None,
            proxy: ProxySpec::default(),
            ..s.clone()
        };
        strip(self) != strip(other)
    }
}

/// A service as the controller keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Service {
    /// The spec of the current revision.
    pub spec: ServiceSpec,
    /// Current revision (1 at creation, +1 per template change).
    pub revision: u32,
    /// Earlier revisions, oldest first (at most [`HISTORY`]).
    pub history: Vec<(u32, ServiceSpec)>,
    /// Desired replica count now (the spec's, a `scale`, or the autoscaler's).
    pub desired: u32,
    /// Owner.
    pub uid: u32,
    /// Owner's primary group.
    pub gid: u32,
    /// Owner's name.
    pub user: String,
    /// Submit directory (the default working directory).
    pub submit_dir: String,
    /// The umask of the last `apply`: its replicas run with it (`None`, from an older client
    /// or record: 0022).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umask: Option<u32>,
    /// Created.
    pub created: Time,
    /// Being deleted: every replica drains, then the record goes.
    pub deleting: bool,
    /// Desired count over time (milliseconds, count), newest last, bounded.
    pub scale_log: Vec<(i64, u32)>,
    /// Autoscaler recommendations within the scale-down window (not persisted).
    #[serde(skip)]
    pub recommendations: VecDeque<(i64, u32)>,
    /// The Kubernetes Deployment it was last written as (`kubectl apply`, the Kubernetes API),
    /// as submitted: its metadata (labels, annotations, the last-applied configuration) and
    /// spec. `None` for a service applied as a Tandem spec. Its status is never kept: it is
    /// derived from the service's state when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube: Option<serde_json::Value>,
}

/// Revisions kept for `rollout undo`.
pub const HISTORY: usize = 10;

/// Entries kept in [`Service::scale_log`].
pub const SCALE_LOG: usize = 500;

impl Service {
    /// Records a new desired count.
    pub fn set_desired(&mut self, now_ms: i64, n: u32) {
        if n != self.desired || self.scale_log.is_empty() {
            self.desired = n;
            self.scale_log.push((now_ms, n));
            if self.scale_log.len() > SCALE_LOG {
                self.scale_log.remove(0);
            }
        }
    }
}

/// What reconciliation sees of one replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaView {
    /// Job id.
    pub id: u64,
    /// Revision it runs.
    pub revision: u32,
    /// Where it is.
    pub state: ReplicaState,
}

/// What reconciliation decides for one service: replicas to create (of the current revision)
/// and replicas to drain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Actions {
    /// New replicas to create.
    pub create: u32,
    /// Replicas to take out of service.
    pub drain: Vec<u64>,
}

/// Removal order: the least useful first (pending, crash-looping, not ready, starting, then
/// ready ones, newest first).
fn removal_rank(r: &ReplicaView) -> (u8, std::cmp::Reverse<u64>) {
    let k = match r.state {
        ReplicaState::Pending => 0,
        ReplicaState::CrashLoop => 1,
        ReplicaState::NotReady => 2,
        ReplicaState::Starting => 3,
        _ => 4,
    };
    (k, std::cmp::Reverse(r.id))
}

/// Level-triggered reconciliation of one service: given its active replicas (on their way out
/// ones excluded), the desired count and revision, and the rolling-update limits, what to do
/// now. Calling it again with the outcome applied asks for nothing more.
pub fn reconcile(active: &[ReplicaView], desired: u32, revision: u32, surge: Portion, unavailable: Portion) -> Actions {
    let mut act = Actions::default();
    let (new, old): (Vec<&ReplicaView>, Vec<&ReplicaView>) = active.iter().partition(|r| r.revision == revision);
    let ready = |r: &&ReplicaView| r.state == ReplicaState::Ready;
    if old.is_empty() {
        let n = new.len() as u32;
        if n < desired {
            act.create = desired - n;
        } else if n > desired {
            let mut v: Vec<&ReplicaView> = new.clone();
            v.sort_by_key(|r| removal_rank(r));
            act.drain = v.iter().take((n - desired) as usize).map(|r| r.id).collect();
        }
        return act;
    }
    // A rollout in progress (Kubernetes' Deployment arithmetic).
    let mut surge_n = surge.of(desired, true);
    let unavail_n = unavailable.of(desired, false);
    if surge_n == 0 && unavail_n == 0 {
        surge_n = 1;
    }
    let total = active.len() as u32;
    let max_total = desired + surge_n;
    let new_n = new.len() as u32;
    if new_n < desired && total < max_total {
        act.create = (max_total - total).min(desired - new_n);
    }
    if new_n > desired {
        let mut v: Vec<&ReplicaView> = new.clone();
        v.sort_by_key(|r| removal_rank(r));
        act.drain.extend(v.iter().take((new_n - desired) as usize).map(|r| r.id));
    }
    // Old replicas go while enough stay available: not-ready ones first (they cost nothing),
    // then ready ones, as long as ready replicas stay at desired - max_unavailable.
    let min_available = desired.saturating_sub(unavail_n) as i64;
    let new_unavailable = new.iter().filter(|r| !ready(r)).count() as i64;
    let mut budget = total as i64 - min_available - new_unavailable;
    let mut old_sorted = old.clone();
    old_sorted.sort_by_key(|r| removal_rank(r));
    for o in old_sorted {
        if budget <= 0 {
            break;
        }
        act.drain.push(o.id);
        budget -= 1;
    }
    act
}

/// The autoscaler: from the in-flight and held requests summed over the proxies, the desired
/// count. Scales up at once, down only to the highest recommendation of the window; within 10%
/// of the target it keeps the current count (Kubernetes' tolerance). With `min` 0 and nothing in
/// flight for a whole window, it scales to zero; a held request brings it back to at least one.
pub fn autoscale(svc: &mut Service, a: &Autoscale, now_ms: i64, inflight: u64, waiting: u64) -> u32 {
    let cur = svc.desired;
    let load = (inflight + waiting) as f64;
    let mut want = (load / a.target).ceil() as u32;
    if cur > 0 && want > 0 {
        let ratio = load / (a.target * cur as f64);
        if (ratio - 1.0).abs() <= 0.1 {
            want = cur;
        }
    }
    if waiting > 0 {
        want = want.max(1);
    }
    let want = want.clamp(a.min, a.max);
    svc.recommendations.push_back((now_ms, want));
    while svc.recommendations.front().is_some_and(|(t, _)| *t < now_ms - a.window_ms) {
        svc.recommendations.pop_front();
    }
    if want >= cur {
        return want;
    }
    // Scale down to the highest recommendation within the window.
    let highest = svc.recommendations.iter().map(|(_, n)| *n).max().unwrap_or(want);
    highest.min(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(toml_like: impl FnOnce(&mut ServiceSpec)) -> Result<Resolved, String> {
        let mut s = ServiceSpec { name: "echo".into(), command: vec!["python3".into()], ..Default::default() };
        toml_like(&mut s);
        s.resolve()
    }

    #[test]
    fn defaults_are_kubernetes_defaults() {
        let r = spec(|s| s.readiness = Some(ProbeSpec { http: Some("/".into()), ..Default::default() })).unwrap();
        let p = r.readiness.unwrap();
        assert_eq!((p.period_ms, p.timeout_ms, p.failure_threshold, p.success_threshold), (10_000, 1_000, 3, 1));
        assert_eq!((r.surge, r.unavailable), (Portion::Percent(25), Portion::Percent(25)));
        assert_eq!((r.replicas, r.cpus, r.memory, r.balance.as_str(), r.retries, r.grace_ms), (1, 1, 0, "round_robin", 2, 30_000));
    }

    #[test]
    fn bad_values_say_what_is_wrong() {
        let e = |f: fn(&mut ServiceSpec)| spec(f).unwrap_err();
        assert!(e(|s| s.replicas = Some(Quantity::Num(-1.0))).contains("0 or more"));
        assert!(e(|s| s.replicas = Some(Quantity::Num(1.5))).contains("whole"));
        assert!(e(|s| s.name = "Echo_1".into()).contains("invalid service name"));
        assert!(e(|s| s.command.clear()).contains("command"));
        assert!(e(|s| s.resources.memory = Some(Quantity::Text("12XB".into()))).contains("unit"));
        assert!(e(|s| s.readiness = Some(ProbeSpec::default())).contains("http"));
        assert!(e(|s| s.readiness = Some(ProbeSpec { http: Some("x".into()), ..Default::default() })).contains("'/'"));
        assert!(
            e(|s| s.liveness =
                Some(ProbeSpec { tcp: Some(true), period: Some(Quantity::Text("10 parsecs".into())), ..Default::default() }))
            .contains("unit")
        );
        assert!(e(|s| s.env.insert("PORT".into(), "1".into()).map_or((), |_| ())).contains("PORT"));
        assert!(e(|s| s.proxy.balance = Some("random".into())).contains("balance"));
        assert_eq!(spec(|s| s.proxy.balance = Some("llm".into())).unwrap().balance, "llm");
        assert!(!spec(|_| ()).unwrap().resume_streams, "off by default");
        assert!(spec(|s| s.proxy.resume_streams = Some(true)).unwrap().resume_streams);
        let no_retry = |s: &mut ServiceSpec| {
            s.proxy.resume_streams = Some(true);
            s.proxy.retries = Some(Quantity::Num(0.0));
        };
        assert!(e(no_retry).contains("resume_streams needs proxy.retries"));
        assert!(
            e(|s| {
                s.rolling_update.max_surge = Some(Quantity::Num(0.0));
                s.rolling_update.max_unavailable = Some(Quantity::Text("0%".into()));
            })
            .contains("both be 0")
        );
        assert!(
            e(|s| {
                s.replicas = Some(Quantity::Num(2.0));
                s.autoscale = Some(AutoscaleSpec::default());
            })
            .contains("not both")
        );
        assert!(e(|s| s.autoscale = Some(AutoscaleSpec { max: Some(Quantity::Num(3.0)), ..Default::default() })).contains("target"));
    }

    #[test]
    fn fair_queue_settings_are_checked() {
        let t = |w: Option<Quantity>, keys: &[&str]| TenantSpec { weight: w, keys: keys.iter().map(|k| k.to_string()).collect() };
        let fair = |s: &mut ServiceSpec| {
            s.proxy.balance = Some("llm".into());
            s.proxy.max_concurrency = Some(Quantity::Num(8.0));
        };
        let r = spec(|s| {
            fair(s);
            s.proxy.max_wait = Some(Quantity::Text("2s".into()));
            s.proxy.tenant_header = Some("X-Tenant".into());
            s.proxy.tenants.insert("alice".into(), t(Some(Quantity::Num(2.0)), &["sk-a1", "sk-a2"]));
            s.proxy.tenants.insert("bob".into(), t(None, &[]));
        })
        .unwrap();
        assert_eq!((r.max_concurrency, r.max_wait_ms, r.tenant_header.as_deref()), (8, 2_000, Some("x-tenant")));
        assert_eq!(r.tenants.len(), 2);
        assert_eq!((r.tenants[0].name.as_str(), r.tenants[0].weight, r.tenants[0].keys.len()), ("alice", 2, 2));
        assert_eq!(r.tenants[1].weight, 1, "default weight");
        let plain = spec(|_| ()).unwrap();
        assert_eq!((plain.max_concurrency, plain.max_wait_ms, plain.tenants.len()), (0, DEFAULT_MAX_WAIT_MS, 0));
        assert_eq!((r.prefill_pace, plain.prefill_pace), (DEFAULT_PREFILL_PACE, DEFAULT_PREFILL_PACE));
        for (pace, want) in [(0.0, 0), (4.0, 4)] {
            let r = spec(|s| {
                fair(s);
                s.proxy.prefill_pace = Some(Quantity::Num(pace));
            })
            .unwrap();
            assert_eq!(r.prefill_pace, want);
        }

        let e = |f: &dyn Fn(&mut ServiceSpec)| spec(f).unwrap_err();
        let msg = e(&|s| {
            fair(s);
            s.proxy.max_concurrency = Some(Quantity::Num(-1.0));
        });
        assert!(msg.contains("proxy.max_concurrency must be between 1"), "{msg}");
        assert!(
            e(&|s| {
                fair(s);
                s.proxy.max_concurrency = Some(Quantity::Num(0.0));
            })
            .contains("between 1")
        );
        assert!(e(&|s| s.proxy.max_concurrency = Some(Quantity::Num(4.0))).contains("needs balance = \"llm\""));
        assert!(e(&|s| s.proxy.max_wait = Some(Quantity::Text("2s".into()))).contains("needs proxy.max_concurrency"));
        assert!(e(&|s| s.proxy.prefill_pace = Some(Quantity::Num(1.0))).contains("proxy.prefill_pace needs proxy.max_concurrency"));
        for (bad, want) in [
            (Quantity::Num(-1.0), "between 0 and"),
            (Quantity::Num(0.5), "whole number"),
            (Quantity::Num(f64::INFINITY), "finite"),
            (Quantity::Text("fast".into()), "must be a number"),
            (Quantity::Num(1e12), "between 0 and"),
        ] {
            let msg = e(&|s| {
                fair(s);
                s.proxy.prefill_pace = Some(bad.clone());
            });
            assert!(msg.contains("proxy.prefill_pace") && msg.contains(want), "{msg}");
        }
        assert!(
            e(&|s| {
                s.proxy.tenants.insert("a".into(), t(None, &[]));
            })
            .contains("proxy.tenants needs proxy.max_concurrency")
        );
        for (bad, want) in [
            (Quantity::Text("heavy".into()), "proxy.tenants.a.weight must be a number"),
            (Quantity::Num(0.0), "proxy.tenants.a.weight must be between 1 and 1000"),
            (Quantity::Num(-2.0), "between 1 and 1000"),
            (Quantity::Num(1.5), "whole number"),
            (Quantity::Num(f64::NAN), "finite"),
        ] {
            let msg = e(&|s| {
                fair(s);
                s.proxy.tenants.insert("a".into(), t(Some(bad.clone()), &[]));
            });
            assert!(msg.contains(want), "{msg}");
        }
        for (bad, want) in [
            (Quantity::Text("-2s".into()), "duration like"),
            (Quantity::Text("2 fortnights".into()), "unit"),
            (Quantity::Num(0.0), "between 10 ms"),
        ] {
            let msg = e(&|s| {
                fair(s);
                s.proxy.max_wait = Some(bad.clone());
            });
            assert!(msg.contains("proxy.max_wait") && msg.contains(want), "{msg}");
        }
        let msg = e(&|s| {
            fair(s);
            s.proxy.tenants.insert("a".into(), t(None, &["sk-secret"]));
            s.proxy.tenants.insert("b".into(), t(None, &["sk-secret"]));
        });
        assert!(msg.contains("also a key of tenant \"a\"") && !msg.contains("sk-secret"), "{msg}");
        assert!(
            e(&|s| {
                fair(s);
                s.proxy.tenants.insert("a".into(), t(None, &["has space"]));
            })
            .contains("keys[0]")
        );
        assert!(
            e(&|s| {
                fair(s);
                s.proxy.tenants.insert("a b".into(), t(None, &[]));
            })
            .contains("tenant name")
        );
        for h in ["", "x tenant", "Authorization"] {
            let msg = e(&|s| {
                fair(s);
                s.proxy.tenant_header = Some(h.into());
            });
            assert!(msg.contains("proxy.tenant_header"), "{msg}");
        }
        // Unknown keys are refused by name (TOML, as `tandem service apply -f` reads it).
        let toml_err = |text: &str| toml::from_str::<ServiceSpec>(text).unwrap_err().to_string();
        let base = "name = \"chat\"\ncommand = [\"x\"]\n[proxy]\nbalance = \"llm\"\nmax_concurrency = 4\n";
        assert!(toml_err(&format!("{base}max_concurency = 3\n")).contains("max_concurency"));
        assert!(toml_err(&format!("{base}[proxy.tenants.a]\nwieght = 2\n")).contains("wieght"));
        let ok: ServiceSpec =
            toml::from_str(&format!("{base}max_wait = \"2s\"\n[proxy.tenants.a]\nweight = 2\nkeys = [\"k1\"]\n")).unwrap();
        assert_eq!(ok.resolve().unwrap().tenants[0].weight, 2);
    }

    #[test]
    fn memory_and_durations() {
        assert_eq!(parse_memory(&Quantity::Text("256MiB".into())).unwrap(), 256 << 20);
        assert_eq!(parse_memory(&Quantity::Text("1Gi".into())).unwrap(), 1 << 30);
        assert_eq!(parse_memory(&Quantity::Text("2G".into())).unwrap(), 2 << 30);
        assert_eq!(parse_memory(&Quantity::Num(512.0)).unwrap(), 512 << 20);
        assert_eq!(parse_memory(&Quantity::Text("100B".into())).unwrap(), 100);
        assert_eq!(parse_duration_ms(&Quantity::Text("500ms".into()), "x").unwrap(), 500);
        assert_eq!(parse_duration_ms(&Quantity::Text("2m".into()), "x").unwrap(), 120_000);
        assert_eq!(parse_duration_ms(&Quantity::Num(1.5), "x").unwrap(), 1500);
        assert!(parse_duration_ms(&Quantity::Num(-1.0), "x").is_err());
    }

    fn views(v: &[(u64, u32, ReplicaState)]) -> Vec<ReplicaView> {
        v.iter().map(|&(id, revision, state)| ReplicaView { id, revision, state }).collect()
    }

    #[test]
    fn scale_up_and_down() {
        use ReplicaState::*;
        assert_eq!(reconcile(&views(&[(1, 1, Ready)]), 3, 1, Portion::Percent(25), Portion::Percent(25)).create, 2);
        let a = reconcile(&views(&[(1, 1, Ready), (2, 1, Pending), (3, 1, Ready)]), 1, 1, Portion::Percent(25), Portion::Percent(25));
        assert_eq!(a.drain, vec![2, 3], "pending first, then the newest ready one");
    }

    /// Simulates a rolling update to the end: at no point are fewer than desired - unavailable
    /// replicas ready, never more than desired + surge exist, and it finishes.
    #[test]
    fn rolling_update_keeps_limits_and_finishes() {
        use ReplicaState::*;
        for (desired, surge, unavail) in [
            (3, Portion::Percent(25), Portion::Percent(25)),
            (4, Portion::Count(1), Portion::Count(0)),
            (1, Portion::Count(1), Portion::Count(0)),
            (5, Portion::Count(0), Portion::Count(2)),
        ] {
            let mut reps: Vec<ReplicaView> = (1..=desired as u64).map(|id| ReplicaView { id, revision: 1, state: Ready }).collect();
            let mut next = 100;
            let min_ready = desired - unavail.of(desired, false);
            let max_total =
                desired + surge.of(desired, true).max(u32::from(surge.of(desired, true) == 0 && unavail.of(desired, false) == 0));
            for round in 0..50 {
                let a = reconcile(&reps, desired, 2, surge, unavail);
                reps.retain(|r| !a.drain.contains(&r.id));
                assert!(reps.iter().filter(|r| r.state == Ready).count() as u32 >= min_ready, "round {round}: {reps:?}");
                for _ in 0..a.create {
                    reps.push(ReplicaView { id: next, revision: 2, state: Starting });
                    next += 1;
                }
                assert!(reps.len() as u32 <= max_total, "round {round}: {reps:?}");
                // New replicas become ready one round later.
                for r in &mut reps {
                    if r.state == Starting {
                        r.state = Ready;
                    }
                }
                if reps.iter().all(|r| r.revision == 2) && reps.len() as u32 == desired {
                    break;
                }
            }
            assert!(reps.iter().all(|r| r.revision == 2 && r.state == Ready) && reps.len() as u32 == desired, "{reps:?}");
        }
    }

    #[test]
    fn autoscaler_up_fast_down_after_window() {
        let mut s = Service {
            spec: ServiceSpec::default(),
            revision: 1,
            history: vec![],
            desired: 1,
            uid: 0,
            gid: 0,
            user: "u".into(),
            submit_dir: "/".into(),
            umask: None,
            created: 0,
            deleting: false,
            scale_log: vec![],
            recommendations: VecDeque::new(),
            kube: None,
        };
        let a = Autoscale { min: 0, max: 5, target: 2.0, window_ms: 10_000 };
        assert_eq!(autoscale(&mut s, &a, 0, 8, 0), 4);
        s.desired = 4;
        assert_eq!(autoscale(&mut s, &a, 1_000, 100, 0), 5, "clamped to max");
        s.desired = 5;
        assert_eq!(autoscale(&mut s, &a, 2_000, 0, 0), 5, "within the window the peak holds");
        assert_eq!(autoscale(&mut s, &a, 12_500, 0, 0), 0, "after the window it goes to zero");
        s.desired = 0;
        assert_eq!(autoscale(&mut s, &a, 13_000, 0, 1), 1, "a held request wakes it");
    }
}
