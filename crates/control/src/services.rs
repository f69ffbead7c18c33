//! The controller's service half: applying, scaling, undoing and deleting services; turning
//! agents' replica reports into replica states; fast failover of replicas whose node went
//! silent; draining before stopping; the autoscaler; and the endpoint view that proxies watch.
//! Times here are milliseconds, handed in like every other time.

use model::{JobEvent, JobRequest, JobState, MemRequest, NodeState, ReplicaEvent, ReplicaState, RequestKind, Shape, Time};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::service::{self, Actions, ReplicaView, Resolved, Service, ServiceSpec};
use crate::{Controller, Job, JobSpec, NodeRec, Order, Refused, ReplicaInfo, ReplicaReport, ReplicaTask};

/// One replica a proxy may send requests to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// Replica id (`SERVICE-JOBID`; proxies show it to clients in `x-tandem-replica`).
    pub replica: String,
    /// `host:port`.
    pub addr: String,
    /// Node.
    #[serde(default)]
    pub node: String,
}

/// A service as proxies see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceEndpoints {
    /// Name (routing key: `/s/NAME/...` or `Host: NAME`).
    pub name: String,
    /// Balancing policy: `round_robin`, `least_request` or `p2c`.
    #[serde(default = "default_balance")]
    pub balance: String,
    /// How long to hold a request when there is no endpoint, milliseconds (then 503).
    #[serde(default = "default_hold_ms")]
    pub hold_ms: u64,
    /// Retries on another replica after a retryable failure.
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// OpenAI streams whose replica fails go on on another replica (`[proxy] resume_streams`).
    #[serde(default)]
    pub resume_streams: bool,
    /// Ready replicas: the only ones that get new requests.
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
    /// Replicas leaving: no new requests; in-flight ones finish.
    #[serde(default)]
    pub draining: Vec<String>,
    /// Requests in flight per replica before the proxy queues them (0: no limit, no queue).
    #[serde(default)]
    pub max_concurrency: u32,
    /// Bound on a request's wait in the proxy's fair queue, milliseconds (then 429).
    #[serde(default = "default_max_wait_ms")]
    pub max_wait_ms: u64,
    /// Header naming a request's tenant.
    #[serde(default)]
    pub tenant_header: Option<String>,
    /// Tenants of the fair queue: name, weight and API keys.
    #[serde(default)]
    pub tenants: Vec<crate::service::Tenant>,
    /// Streamed requests per replica awaiting their first token before the proxy sends it
    /// another queued one (0: not paced; with `max_concurrency` only).
    #[serde(default = "default_prefill_pace")]
    pub prefill_pace: u32,
}

fn default_prefill_pace() -> u32 {
    crate::service::DEFAULT_PREFILL_PACE
}

fn default_max_wait_ms() -> u64 {
    crate::service::DEFAULT_MAX_WAIT_MS
}

fn default_balance() -> String {
    "round_robin".into()
}

fn default_hold_ms() -> u64 {
    60_000
}

fn default_retries() -> u32 {
    2
}

/// What proxies watch: every service's endpoints, with a version that grows with each change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointView {
    /// Version.
    pub version: u64,
    /// Services.
    #[serde(default)]
    pub services: Vec<ServiceEndpoints>,
    /// When this version was made (Unix milliseconds), so a proxy can tell how long the
    /// change took to reach it.
    #[serde(default)]
    pub changed_ms: i64,
}

/// A proxy's gauges for one service.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProxyServiceStats {
    /// Requests in flight.
    pub inflight: u64,
    /// Requests held for want of a replica.
    pub waiting: u64,
    /// Requests so far.
    pub requests: u64,
    /// Failed requests so far.
    pub failures: u64,
    /// In-flight requests per replica.
    pub replicas: BTreeMap<String, u64>,
}

/// What the controller remembers of a proxy.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProxyState {
    seen: u64,
    last_ms: i64,
    stats: BTreeMap<String, ProxyServiceStats>,
}

/// A proxy that has not synced for this long no longer counts (for draining and autoscaling).
const PROXY_FRESH_MS: i64 = 3_000;

/// Replica id as proxies and users see it.
pub fn replica_id(service: &str, job: u64) -> String {
    format!("{service}-{job}")
}

/// `PATH` of a replica whose spec's `env` sets none: systemd's default for services. Not the
/// applying shell's: a spec means the same whoever applies it, from whatever shell.
pub const REPLICA_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A replica's environment: its spec's `env`, with [`REPLICA_PATH`] unless that sets `PATH`.
fn replica_env(env: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    if !env.contains_key("PATH") {
        out.push(("PATH".into(), REPLICA_PATH.into()));
    }
    out
}

impl Controller {
    /// Services, by name.
    pub fn services(&self) -> impl Iterator<Item = &Service> {
        self.services.values()
    }

    /// One service.
    pub fn service(&self, name: &str) -> Option<&Service> {
        self.services.get(name)
    }

    /// Replica jobs of a service (live and recent), by id.
    pub fn replicas_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Job> + 'a {
        self.replica_jobs().filter(move |j| j.replica.as_ref().is_some_and(|r| r.service == name))
    }

    /// Every replica job not yet ended (an index, so service work does not scan all jobs).
    fn replica_jobs(&self) -> impl Iterator<Item = &Job> + '_ {
        self.live_replicas.iter().filter_map(|id| self.jobs.get(id).map(|j| &**j)).filter(|j| !j.state.is_final())
    }

    /// Proxy gauges of a service, summed over the proxies that synced lately.
    pub fn proxy_stats(&self, name: &str) -> ProxyServiceStats {
        let mut sum = ProxyServiceStats::default();
        for p in self.proxies.values().filter(|p| p.last_ms >= self.now_ms - PROXY_FRESH_MS) {
            if let Some(s) = p.stats.get(name) {
                sum.inflight += s.inflight;
                sum.waiting += s.waiting;
                sum.requests += s.requests;
                sum.failures += s.failures;
                for (r, n) in &s.replicas {
                    *sum.replicas.entry(r.clone()).or_default() += n;
                }
            }
        }
        sum
    }

    fn owns(&self, uid: u32, name: &str) -> Result<&Service, Refused> {
        let s = self.services.get(name).ok_or_else(|| Refused::NotFound(format!("no service named {name}")))?;
        if uid != 0 && uid != s.uid {
            return Err(Refused::Forbidden(format!("service {name} belongs to another user")));
        }
        Ok(s)
    }

    /// Checks a spec against the cluster: its values, its QOS and partition, and that one
    /// replica fits some node.
    fn check_spec(&self, spec: &ServiceSpec, user: &str) -> Result<Resolved, Refused> {
        let r = spec.resolve().map_err(Refused::Invalid)?;
        if let Some(q) = &spec.qos
            && self.settings.cluster.qos(Some(q)).is_none()
        {
            return Err(Refused::Invalid(format!("invalid qos specified: {q}")));
        }
        if self.settings.cluster.partition(spec.partition.as_deref()).is_none() {
            return Err(Refused::Invalid(format!("invalid partition specified: {}", spec.partition.as_deref().unwrap_or(""))));
        }
        let probe = self.replica_request(0, spec, &r, user, 0);
        sched::check_request(&self.node_defs(), &self.settings.cluster, &probe).map_err(|e| Refused::Invalid(e.message))?;
        Ok(r)
    }

    fn replica_request(&self, id: u64, spec: &ServiceSpec, r: &Resolved, user: &str, now: Time) -> JobRequest {
        let shape = Shape {
            cpus_per_task: r.cpus,
            mem: MemRequest::PerNode(r.memory),
            gpus: (r.gpus > 0).then(|| model::GpuRequest {
                per: model::GpuPer::Node(r.gpus),
                gpu_type: r.gpu_type.clone(),
                milli: model::GPU_MILLI,
            }),
            ..Shape::single()
        };
        let mut req = JobRequest::new(id, now, Time::MAX / 4, shape);
        req.name = spec.name.clone();
        req.kind = RequestKind::Replica { service: spec.name.clone() };
        req.user = user.to_string();
        req.account = spec.account.clone().unwrap_or_else(|| user.to_string());
        req.partition = spec.partition.clone();
        req.qos = spec.qos.clone();
        req
    }

    /// Creates or updates a service (`tandem service apply`). A change of what the replicas
    /// run makes a new revision, rolled out within the surge and unavailability limits; a
    /// change of count only scales. Returns the revision and whether anything changed.
    pub fn apply_service(
        &mut self,
        now_ms: i64,
        uid: u32,
        gid: u32,
        user: &str,
        submit_dir: &str,
        mut spec: ServiceSpec,
    ) -> Result<(u32, bool), Refused> {
        self.now_ms = self.now_ms.max(now_ms);
        if spec.workdir.is_none() {
            if !submit_dir.starts_with('/') {
                return Err(Refused::Invalid("the service needs an absolute workdir".into()));
            }
            spec.workdir = Some(submit_dir.to_string());
        }
        // The account and QOS the replicas charge, checked as a batch job's are (an account the
        // user may not charge, a QOS the association does not allow: refused).
        let (account, qos) = self.charge(uid, user, spec.account.as_deref(), spec.qos.as_deref(), 0)?;
        self.check_partition_access(uid, user, spec.partition.as_deref(), &account, qos.as_deref())?;
        (spec.account, spec.qos) = (Some(account), qos);
        let r = self.check_spec(&spec, user)?;
        let name = spec.name.clone();
        if !self.services.contains_key(&name) {
            self.check_namespace(uid, service::split_name(&name).0)?;
        }
        if let Some(old) = self.services.get(&name) {
            if uid != 0 && uid != old.uid {
                return Err(Refused::Forbidden(format!("service {name} belongs to another user")));
            }
            if old.deleting {
                return Err(Refused::Conflict(format!("service {name} is being deleted; apply again once it is gone")));
            }
        }
        let now = now_ms / 1000;
        let svc = self.services.entry(name.clone()).or_insert_with(|| Service {
            spec: spec.clone(),
            revision: 0,
            history: Vec::new(),
            desired: 0,
            uid,
            gid,
            user: user.to_string(),
            submit_dir: submit_dir.to_string(),
            umask: None,
            created: now,
            deleting: false,
            scale_log: Vec::new(),
            recommendations: Default::default(),
            kube: None,
        });
        let mut changed = false;
        if svc.revision == 0 {
            svc.revision = 1;
            changed = true;
            svc.set_desired(now_ms, r.replicas);
        } else {
            if svc.spec.template_differs(&spec) {
                let old = std::mem::replace(&mut svc.spec, spec.clone());
                svc.history.push((svc.revision, old));
                if svc.history.len() > service::HISTORY {
                    svc.history.remove(0);
                }
                svc.revision += 1;
                changed = true;
            } else if svc.spec != spec {
                svc.spec = spec.clone();
                changed = true;
            }
            let desired = match &r.autoscale {
                Some(a) => svc.desired.clamp(a.min, a.max),
                None => r.replicas,
            };
            if desired != svc.desired {
                svc.set_desired(now_ms, desired);
                changed = true;
            }
        }
        if r.autoscale.is_some() && svc.recommendations.is_empty() {
            // The scale-down window starts now: a new service is not scaled down before anyone
            // could send it a request.
            svc.recommendations.push_back((now_ms, svc.desired));
        }
        let rev = svc.revision;
        self.dirty_services.insert(name);
        Ok((rev, changed))
    }

    /// Sets a service's replica count (`tandem service scale`). With autoscaling on, the count
    /// must lie within its bounds and the autoscaler may change it later.
    pub fn scale_service(&mut self, now_ms: i64, uid: u32, name: &str, n: u32) -> Result<(), Refused> {
        let s = self.owns(uid, name)?;
        if n > service::MAX_REPLICAS {
            return Err(Refused::Invalid(format!("at most {} replicas", service::MAX_REPLICAS)));
        }
        if let Ok(r) = s.spec.resolve()
            && let Some(a) = r.autoscale
            && (n < a.min || n > a.max)
        {
            return Err(Refused::Invalid(format!("{name} autoscales between {} and {} replicas", a.min, a.max)));
        }
        if s.deleting {
            return Err(Refused::Conflict(format!("service {name} is being deleted")));
        }
        let s = self.services.get_mut(name).expect("checked");
        s.set_desired(now_ms, n);
        self.dirty_services.insert(name.to_string());
        Ok(())
    }

    /// Rolls back to an earlier revision (`tandem service rollout undo`), by default the one
    /// before the current; it becomes a new revision, rolled out like any other.
    pub fn undo_service(&mut self, now_ms: i64, uid: u32, name: &str, to: Option<u32>) -> Result<u32, Refused> {
        let s = self.owns(uid, name)?;
        let prev = match to {
            None => s.history.last().cloned(),
            Some(r) => s.history.iter().find(|(n, _)| *n == r).cloned(),
        };
        let Some((_, spec)) = prev else {
            return Err(Refused::Conflict(match to {
                None => format!("service {name} has no earlier revision"),
                Some(r) => format!("service {name} has no revision {r} to go back to"),
            }));
        };
        let mut spec = spec;
        // Keep today's count: an undo changes what runs, not how many.
        spec.replicas = s.spec.replicas.clone();
        spec.autoscale = s.spec.autoscale.clone();
        let (gid, user, dir) = (s.gid, s.user.clone(), s.submit_dir.clone());
        self.apply_service(now_ms, uid, gid, &user, &dir, spec).map(|(rev, _)| rev)
    }

    /// Sets the umask a service's replicas start with from now on (that of the command that
    /// applied it last), once [`Controller::apply_service`] accepted it.
    pub fn set_service_umask(&mut self, name: &str, umask: Option<u32>) {
        if let Some(s) = self.services.get_mut(name)
            && s.umask != umask
        {
            s.umask = umask.map(|m| m & 0o777);
            self.dirty_services.insert(name.to_string());
        }
    }

    /// Records the Kubernetes object a service was written as (`Service::kube`); `None` when it
    /// is applied as a Tandem spec again.
    pub fn set_service_kube(&mut self, name: &str, kube: Option<serde_json::Value>) {
        if let Some(s) = self.services.get_mut(name)
            && s.kube != kube
        {
            s.kube = kube;
            self.dirty_services.insert(name.to_string());
        }
    }

    /// Deletes a service: its replicas drain and stop, then the record goes.
    pub fn delete_service(&mut self, uid: u32, name: &str) -> Result<(), Refused> {
        self.owns(uid, name)?;
        let s = self.services.get_mut(name).expect("checked");
        s.deleting = true;
        self.dirty_services.insert(name.to_string());
        Ok(())
    }

    /// Takes the replica reports of a heartbeat (and notes the heartbeat's time).
    pub fn replica_reports(&mut self, now_ms: i64, node: &str, reports: &[ReplicaReport]) {
        self.now_ms = self.now_ms.max(now_ms);
        let Some(&i) = self.node_index.get(node) else { return };
        let mut changed = self.suspect(&self.nodes[i]);
        self.nodes[i].seen_ms = now_ms;
        for rep in reports {
            let Some(j) = self.jobs.get_mut(&rep.job) else { continue };
            if j.epoch != rep.epoch || j.state != JobState::Running || !j.allocs.iter().any(|(n, _)| n == node) {
                continue;
            }
            let Some(r) = &mut j.replica else { continue };
            let ev = if rep.crashloop {
                ReplicaEvent::Crashed
            } else if rep.ready {
                ReplicaEvent::Ready
            } else {
                ReplicaEvent::NotReady
            };
            let next = r.state.step(ev).unwrap_or(r.state);
            let before = (r.state, r.port, r.restarts, r.message.clone());
            if next != r.state {
                r.since_ms = now_ms;
            }
            r.state = next;
            r.port = Some(rep.port);
            r.restarts = rep.restarts;
            r.message = rep.message.clone();
            if before != (r.state, r.port, r.restarts, r.message.clone()) {
                changed |= before.0 != r.state || before.1 != r.port;
                self.dirty_jobs.insert(rep.job);
            }
        }
        if changed {
            self.refresh_view();
        }
    }

    /// A proxy's sync: records its gauges and the view version it holds, and returns the
    /// current view.
    pub fn proxy_sync(&mut self, now_ms: i64, proxy: &str, since: u64, stats: BTreeMap<String, ProxyServiceStats>) -> EndpointView {
        self.now_ms = self.now_ms.max(now_ms);
        if self.proxies.len() > 1000 && !self.proxies.contains_key(proxy) {
            self.proxies.retain(|_, p| p.last_ms >= now_ms - 60_000);
        }
        let p = self.proxies.entry(proxy.to_string()).or_default();
        p.seen = since;
        p.last_ms = now_ms;
        p.stats = stats;
        self.endpoint_view()
    }

    /// The current endpoint view.
    pub fn endpoint_view(&self) -> EndpointView {
        EndpointView { version: self.ep_version, services: self.ep_view.clone(), changed_ms: self.ep_changed_ms }
    }

    /// Version of the endpoint view.
    pub fn endpoint_version(&self) -> u64 {
        self.ep_version
    }

    /// Whether a node has been silent past the failover time. Not while most nodes are: then
    /// the likelier story is a controller that could not keep up (or a network split), and fast
    /// failover waits, as Kubernetes' node controller stops evicting when most of a zone is
    /// unhealthy; the leases still decide.
    pub(crate) fn suspect(&self, n: &NodeRec) -> bool {
        !self.silence_storm && self.silent(n)
    }

    /// Indices of the nodes [`Controller::suspect`] and still up: one scan, the failover time
    /// computed once.
    pub(crate) fn suspect_up(&self) -> Vec<u32> {
        if self.silence_storm || self.now_ms <= 0 {
            return Vec::new();
        }
        let limit = self.failover_ms();
        let now_ms = self.now_ms;
        (0..self.nodes.len())
            .filter(|&i| {
                let n = &self.nodes[i];
                n.node.state == NodeState::Up && now_ms - n.seen_ms > limit
            })
            .map(|i| i as u32)
            .collect()
    }

    fn silent(&self, n: &NodeRec) -> bool {
        n.node.state != NodeState::Down && self.now_ms > 0 && self.now_ms - n.seen_ms > self.failover_ms()
    }

    /// Recomputes whether most live nodes are silent at once.
    fn judge_silence(&mut self) {
        let live = self.nodes.iter().filter(|n| n.node.state != NodeState::Down).count();
        let silent = self.nodes.iter().filter(|n| self.silent(n)).count();
        self.silence_storm = live >= 2 && silent * 2 > live;
    }

    /// Recomputes the endpoint view; bumps its version when it changed.
    pub(crate) fn refresh_view(&mut self) {
        let mut by_service: BTreeMap<&str, (Vec<Endpoint>, Vec<String>)> = BTreeMap::new();
        for j in self.replica_jobs() {
            let Some(r) = &j.replica else { continue };
            if j.state != JobState::Running {
                continue;
            }
            let node = j.allocs.first().map(|(n, _)| n.as_str()).unwrap_or("");
            let rec = self.node_index.get(node).map(|&i| &self.nodes[i]);
            let e = by_service.entry(r.service.as_str()).or_default();
            match r.state {
                ReplicaState::Ready => {
                    if let (Some(rec), Some(port)) = (rec, r.port)
                        && !self.suspect(rec)
                    {
                        e.0.push(Endpoint {
                            replica: replica_id(&r.service, j.req.id.0),
                            addr: format!("{}:{port}", rec.addr),
                            node: node.to_string(),
                        });
                    }
                }
                ReplicaState::Draining | ReplicaState::Stopping => e.1.push(replica_id(&r.service, j.req.id.0)),
                _ => {}
            }
        }
        let mut view = Vec::with_capacity(self.services.len());
        for s in self.services.values() {
            let Ok(r) = s.spec.resolve() else { continue };
            let (endpoints, draining) = by_service.remove(s.spec.name.as_str()).unwrap_or_default();
            view.push(ServiceEndpoints {
                name: s.spec.name.clone(),
                balance: r.balance,
                hold_ms: r.hold_ms,
                retries: r.retries,
                resume_streams: r.resume_streams,
                endpoints,
                draining,
                max_concurrency: r.max_concurrency,
                max_wait_ms: r.max_wait_ms,
                tenant_header: r.tenant_header,
                tenants: r.tenants,
                prefill_pace: r.prefill_pace,
            });
        }
        if view != self.ep_view {
            self.ep_view = view;
            self.ep_version += 1;
            self.ep_changed_ms = self.now_ms;
        }
    }

    /// The replica part of a replica job's task.
    pub(crate) fn replica_task(&self, j: &Job) -> Option<ReplicaTask> {
        let info = j.replica.as_ref()?;
        let svc = self.services.get(&info.service)?;
        let spec = if svc.revision == info.revision {
            &svc.spec
        } else {
            svc.history.iter().find(|(n, _)| *n == info.revision).map(|(_, s)| s).unwrap_or(&svc.spec)
        };
        let r = spec.resolve().ok()?;
        Some(ReplicaTask {
            service: info.service.clone(),
            replica: replica_id(&info.service, j.req.id.0),
            readiness: r.readiness,
            liveness: r.liveness,
            startup: r.startup,
            grace_ms: r.grace_ms,
        })
    }

    fn create_replica(&mut self, now_ms: i64, name: &str) -> Option<u64> {
        let svc = self.services.get(name)?;
        let spec = svc.spec.clone();
        let r = spec.resolve().ok()?;
        let id = self.next_id;
        let now = now_ms / 1000;
        let req = self.replica_request(id, &spec, &r, &svc.user, now);
        let workdir = spec.workdir.clone().unwrap_or_else(|| svc.submit_dir.clone());
        let output = r.output.replace("%x", name);
        let mut argv = spec.command.clone();
        argv.extend(spec.args.iter().cloned());
        let job_spec = JobSpec {
            script: String::new(),
            script_args: argv,
            workdir: workdir.clone(),
            submit_dir: svc.submit_dir.clone(),
            submit_host: "localhost".into(),
            env: replica_env(&spec.env),
            output,
            error: None,
            append: true,
            requeue: false,
            signal: None,
            interactive: false,
            uid: svc.uid,
            gid: svc.gid,
            recorded: Vec::new(),
            login_env: false,
            umask: svc.umask,
            // Checked when the service was applied.
            container: spec.container(&workdir).ok().flatten(),
            retries: None,
        };
        let job = Job {
            replica: Some(ReplicaInfo {
                service: name.to_string(),
                revision: svc.revision,
                state: ReplicaState::Pending,
                port: None,
                restarts: 0,
                message: None,
                since_ms: now_ms,
                drain_version: 0,
                stop_ms: None,
            }),
            ..Job::new(req, job_spec)
        };
        self.jobs.insert(id, Box::new(job));
        self.live_replicas.insert(id);
        self.dirty_jobs.insert(id);
        self.next_id += 1;
        self.next_id_dirty = true;
        Some(id)
    }

    /// Whether taking these jobs away leaves every service they serve at or above its
    /// `min_available` ready replicas.
    pub(crate) fn disruption_allowed(&self, victims: impl Iterator<Item = u64>) -> bool {
        let mut lost: BTreeMap<&str, u32> = BTreeMap::new();
        for id in victims {
            if let Some(r) = self.jobs.get(&id).and_then(|j| j.replica.as_ref())
                && r.state == ReplicaState::Ready
            {
                *lost.entry(r.service.as_str()).or_default() += 1;
            }
        }
        lost.into_iter().all(|(name, n)| {
            let Some(svc) = self.services.get(name) else { return true };
            let Some(floor) = svc.spec.resolve().ok().and_then(|r| r.min_available).map(|p| p.of(svc.desired, true)) else { return true };
            let ready =
                self.replicas_of(name).filter(|j| j.replica.as_ref().is_some_and(|r| r.state == ReplicaState::Ready)).count() as u32;
            ready.saturating_sub(n) >= floor
        })
    }

    /// Takes a replica out of the endpoint set; it stops once proxies have seen the view
    /// without it and finished its requests (or its grace time ends).
    pub(crate) fn drain_replica(&mut self, id: u64, now_ms: i64) {
        let Some(j) = self.jobs.get_mut(&id) else { return };
        let Some(r) = &mut j.replica else { return };
        let Ok(s) = r.state.step(ReplicaEvent::Drain) else { return };
        r.state = s;
        r.since_ms = now_ms;
        self.dirty_jobs.insert(id);
        self.refresh_view();
        let version = self.ep_version;
        if let Some(r) = self.jobs.get_mut(&id).and_then(|j| j.replica.as_mut()) {
            r.drain_version = version;
        }
    }

    /// Whether every live proxy has stopped sending to a draining replica and finished what it
    /// had sent.
    fn drained(&self, service: &str, replica: &str, drain_version: u64) -> bool {
        self.proxies
            .values()
            .filter(|p| p.last_ms >= self.now_ms - PROXY_FRESH_MS)
            .all(|p| p.seen >= drain_version && p.stats.get(service).and_then(|s| s.replicas.get(replica)).copied().unwrap_or(0) == 0)
    }

    /// Service work, run often (every few hundred milliseconds): failover of replicas whose
    /// node went silent, draining and stopping, autoscaling, and reconciliation of every
    /// service. Scheduling of the replicas it creates is `tick`'s.
    pub fn services_tick(&mut self, now_ms: i64) -> usize {
        self.now_ms = self.now_ms.max(now_ms);
        let now_ms = self.now_ms;
        self.judge_silence();
        let mut changes = 0;
        // 1. Failover: replicas on silent nodes are lost now, replaced below.
        let jobs = &self.jobs;
        self.live_replicas.retain(|id| jobs.get(id).is_some_and(|j| !j.state.is_final()));
        let lost: Vec<(u64, String, u32)> = self
            .replica_jobs()
            .filter(|j| j.state == JobState::Running && j.replica.as_ref().is_some_and(|r| r.state != ReplicaState::Lost))
            .filter_map(|j| {
                let (node, _) = j.allocs.first()?;
                let &i = self.node_index.get(node)?;
                let rec = &self.nodes[i];
                (self.suspect(rec) || rec.node.state == NodeState::Down).then(|| (j.req.id.0, node.clone(), j.epoch))
            })
            .collect();
        for (id, node, epoch) in lost {
            let j = self.jobs.get_mut(&id).expect("listed");
            let r = j.replica.as_mut().expect("a replica");
            r.state = r.state.step(ReplicaEvent::NodeLost).unwrap_or(ReplicaState::Lost);
            r.since_ms = now_ms;
            j.cancelling = true;
            self.dirty_jobs.insert(id);
            // Stopped when the node comes back (or fences itself at its lease).
            self.order(&node, Order::Kill { job: id, epoch });
            changes += 1;
        }
        // 2. Draining, stopping and pending replicas on their way out.
        let leaving: Vec<(u64, ReplicaInfo, JobState, u32, Vec<String>)> = self
            .replica_jobs()
            .filter_map(|j| {
                let r = j.replica.as_ref()?;
                matches!(r.state, ReplicaState::Draining | ReplicaState::Stopping)
                    .then(|| (j.req.id.0, r.clone(), j.state, j.epoch, j.allocs.iter().map(|(n, _)| n.clone()).collect()))
            })
            .collect();
        for (id, r, state, epoch, nodes) in leaving {
            let grace = self.services.get(&r.service).and_then(|s| s.spec.resolve().ok()).map_or(30_000, |x| x.grace_ms) as i64;
            if state == JobState::Pending {
                let j = self.jobs.get_mut(&id).expect("listed");
                j.state = j.state.step(JobEvent::Cancel).expect("pending can be cancelled");
                j.end = Some(now_ms / 1000);
                let ri = j.replica.as_mut().expect("a replica");
                ri.state = ri.state.step(ReplicaEvent::Ended).unwrap_or(ReplicaState::Gone);
                self.dirty_jobs.insert(id);
                changes += 1;
                continue;
            }
            match r.state {
                ReplicaState::Draining => {
                    let rid = replica_id(&r.service, id);
                    let grace_over = now_ms >= r.since_ms + grace;
                    // The view that leaves it out must exist before proxies can have seen it.
                    if self.drained(&r.service, &rid, r.drain_version) || grace_over {
                        let j = self.jobs.get_mut(&id).expect("listed");
                        j.cancelling = true;
                        let ri = j.replica.as_mut().expect("a replica");
                        ri.state = ri.state.step(ReplicaEvent::Stop).unwrap_or(ReplicaState::Stopping);
                        ri.stop_ms = Some(now_ms);
                        self.dirty_jobs.insert(id);
                        for n in &nodes {
                            self.order(n, Order::Signal { job: id, epoch, signal: 15, batch_only: false, step: None });
                        }
                        changes += 1;
                    }
                }
                ReplicaState::Stopping => {
                    if r.stop_ms.is_none_or(|t| now_ms >= t + grace) {
                        for n in &nodes {
                            self.order(n, Order::Kill { job: id, epoch });
                        }
                    }
                }
                _ => {}
            }
        }
        // 3. Each service: autoscale, then reconcile.
        let names: Vec<String> = self.services.keys().cloned().collect();
        for name in names {
            changes += self.reconcile_service(now_ms, &name);
        }
        self.refresh_view();
        changes
    }

    fn reconcile_service(&mut self, now_ms: i64, name: &str) -> usize {
        let Some(svc) = self.services.get(name) else { return 0 };
        let Ok(r) = svc.spec.resolve() else { return 0 };
        let revision = svc.revision;
        let mut replicas: Vec<(ReplicaView, bool)> = Vec::new();
        let mut remaining = 0;
        for j in self.replicas_of(name) {
            if j.state.is_final() {
                continue;
            }
            remaining += 1;
            let ri = j.replica.as_ref().expect("replica");
            if !ri.state.is_active() {
                continue;
            }
            // A node drained, or one an advance reservation the replica is not in takes soon.
            let now = now_ms / 1000;
            let on_drained = j.allocs.first().is_some_and(|(n, _)| {
                self.node_index.get(n).is_some_and(|&i| self.nodes[i].node.state == NodeState::Drain)
                    || self.reservations.values().any(|r| {
                        r.overlaps(now, now + model::resv::REPLICA_LEAD)
                            && j.req.reservation.as_deref() != Some(r.name.as_str())
                            && r.holds(n)
                    })
            });
            replicas.push((ReplicaView { id: j.req.id.0, revision: ri.revision, state: ri.state }, on_drained));
        }
        if svc.deleting {
            let ids: Vec<u64> = replicas.iter().map(|(v, _)| v.id).collect();
            let n = ids.len();
            for id in ids {
                self.drain_replica(id, now_ms);
            }
            if remaining == 0 {
                self.services.remove(name);
                self.removed_services.push(name.to_string());
                self.dirty_services.remove(name);
                return 1;
            }
            return n;
        }
        if let Some(a) = &r.autoscale {
            let st = self.proxy_stats(name);
            let svc = self.services.get_mut(name).expect("exists");
            let want = service::autoscale(svc, a, now_ms, st.inflight, st.waiting);
            if want != svc.desired {
                svc.set_desired(now_ms, want);
                self.dirty_services.insert(name.to_string());
            }
        }
        let svc = &self.services[name];
        let desired = svc.desired;
        // Replicas on drained nodes are replaced first, and leave once enough others are ready.
        let (evicting, staying): (Vec<(ReplicaView, bool)>, Vec<(ReplicaView, bool)>) = replicas.into_iter().partition(|(_, d)| *d);
        let active: Vec<ReplicaView> = staying.iter().map(|(v, _)| *v).collect();
        let Actions { create, drain } = service::reconcile(&active, desired, revision, r.surge, r.unavailable);
        let mut changes = create as usize + drain.len();
        for id in drain {
            self.drain_replica(id, now_ms);
        }
        for _ in 0..create {
            self.create_replica(now_ms, name);
        }
        if !evicting.is_empty() {
            // Each ready one that leaves must leave at least the floor ready: the others and
            // the evicted ones still there.
            let ready_others = active.iter().filter(|v| v.state == ReplicaState::Ready).count() as u32;
            let ready_evicting = evicting.iter().filter(|(v, _)| v.state == ReplicaState::Ready).count() as u32;
            let floor = r.min_available.map_or(desired.min(1), |p| p.of(desired, true));
            let mut spare = (ready_others + ready_evicting).saturating_sub(floor).min(ready_evicting);
            for (v, _) in evicting {
                if v.state != ReplicaState::Ready || spare > 0 {
                    if v.state == ReplicaState::Ready {
                        spare -= 1;
                    }
                    self.drain_replica(v.id, now_ms);
                    changes += 1;
                }
            }
        }
        changes
    }
}
