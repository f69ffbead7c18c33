//! Service unit tests: reconciliation, failover, draining, rolling updates, preemption and
//! autoscaling, driven by hand-made heartbeats, proxy syncs and ticks (milliseconds).

use super::*;
use crate::service::{AutoscaleSpec, Quantity};
use crate::tests::{batch, ended, spec};
use model::ReplicaState;
use std::collections::BTreeMap;

/// A cluster of `n` nodes and a fake agent per node that runs what it is told and reports
/// every replica ready on a port.
struct World {
    c: Controller,
    nodes: Vec<String>,
    acked: HashMap<String, u64>,
    /// Running tasks per node: (job, epoch) → port.
    running: HashMap<String, BTreeMap<(u64, u32), u16>>,
    signals: Vec<(u64, i32)>,
    next_port: u16,
    /// Nodes whose agent is dead (no heartbeats).
    dead: Vec<String>,
    now_ms: i64,
}

impl World {
    fn new(n: usize, gpus: u32, settings: Settings) -> World {
        let mut c = Controller::new(settings);
        let mut nodes = Vec::new();
        for i in 0..n {
            let mut node = Node::new(format!("n{i}"), 8, 16 << 30, gpus);
            node.gpu_type = (gpus > 0).then(|| "h100".into());
            c.register(0, node, "127.0.0.1".into()).unwrap();
            nodes.push(format!("n{i}"));
        }
        World { c, nodes, acked: HashMap::new(), running: HashMap::new(), signals: vec![], next_port: 10_000, dead: vec![], now_ms: 1_000 }
    }

    /// One round: every live agent heartbeats (carrying out orders), then the service tick and
    /// the scheduling tick run.
    fn round(&mut self, step_ms: i64) {
        self.now_ms += step_ms;
        let now = self.now_ms / 1000;
        for name in self.nodes.clone() {
            if self.dead.contains(&name) {
                continue;
            }
            let running = self.running.entry(name.clone()).or_default();
            let keys: Vec<TaskKey> = running.keys().map(|&(job, epoch)| TaskKey { job, epoch, step: BATCH_STEP, rank: 0 }).collect();
            let reports: Vec<ReplicaReport> = running
                .iter()
                .map(|(&(job, epoch), &port)| ReplicaReport { job, epoch, port, ready: true, restarts: 0, crashloop: false, message: None })
                .collect();
            let prev = self.acked.get(&name).copied().unwrap_or(0);
            let orders = self.c.heartbeat(now, &name, prev, &keys, &[]).unwrap();
            self.c.replica_reports(self.now_ms, &name, &reports);
            let mut exits = Vec::new();
            for (seq, o) in orders {
                if seq <= prev {
                    continue;
                }
                self.acked.insert(name.clone(), seq);
                let running = self.running.get_mut(&name).unwrap();
                match o {
                    Order::Launch(t) => {
                        if t.replica.is_some() {
                            running.insert((t.job, t.epoch), self.next_port);
                            self.next_port += 1;
                        }
                    }
                    Order::Signal { job, epoch, signal, .. } => {
                        self.signals.push((job, signal));
                        if running.remove(&(job, epoch)).is_some() {
                            exits.push(ended(job, epoch, None, Some(signal)));
                        }
                    }
                    Order::Kill { job, epoch } => {
                        if running.remove(&(job, epoch)).is_some() {
                            exits.push(ended(job, epoch, None, Some(9)));
                        }
                    }
                    Order::Attach { .. }
                    | Order::Output { .. }
                    | Order::Epilog { .. }
                    | Order::Reboot { .. }
                    | Order::Suspend { .. }
                    | Order::Resume { .. } => {}
                }
            }
            if !exits.is_empty() {
                let ack = self.acked.get(&name).copied().unwrap_or(0);
                let keys: Vec<TaskKey> =
                    self.running[&name].keys().map(|&(job, epoch)| TaskKey { job, epoch, step: BATCH_STEP, rank: 0 }).collect();
                self.c.heartbeat(now, &name, ack, &keys, &exits).unwrap();
            }
        }
        self.c.services_tick(self.now_ms);
        self.c.tick(now);
        self.c.services_tick(self.now_ms);
    }

    fn apply(&mut self, toml_spec: ServiceSpec) -> Result<(u32, bool), Refused> {
        self.c.apply_service(self.now_ms, 1000, 1000, "alice", "/tmp", toml_spec)
    }

    fn endpoints(&self, name: &str) -> Vec<Endpoint> {
        self.c.endpoint_view().services.into_iter().find(|s| s.name == name).map(|s| s.endpoints).unwrap_or_default()
    }

    fn states(&self, name: &str) -> Vec<ReplicaState> {
        self.c.replicas_of(name).filter(|j| !j.state.is_final()).map(|j| j.replica.as_ref().unwrap().state).collect()
    }
}

fn qos(name: &str, priority: u32, preempt_tier: u32) -> model::Qos {
    model::Qos { name: name.into(), priority, preempt_tier, grace_time: 5, ..model::Qos::normal() }
}

fn echo(replicas: u32) -> ServiceSpec {
    ServiceSpec {
        name: "echo".into(),
        command: vec!["python3".into(), "-m".into(), "http.server".into(), "$PORT".into()],
        replicas: Some(Quantity::Num(replicas as f64)),
        ..Default::default()
    }
}

#[test]
fn replicas_spread_become_endpoints() {
    let mut w = World::new(3, 0, Settings::default());
    assert_eq!(w.apply(echo(3)).unwrap(), (1, true));
    assert_eq!(w.apply(echo(3)).unwrap(), (1, false), "applying the same spec again changes nothing");
    let v0 = w.c.endpoint_version();
    for _ in 0..4 {
        w.round(200);
    }
    let eps = w.endpoints("echo");
    assert_eq!(eps.len(), 3, "{eps:?}");
    let nodes: std::collections::BTreeSet<&str> = eps.iter().map(|e| e.node.as_str()).collect();
    assert_eq!(nodes.len(), 3, "one replica per node: {eps:?}");
    assert!(w.c.endpoint_version() > v0);
    let t = w.c.jobs().find(|j| j.replica.is_some()).unwrap();
    let task = w.c.replica_task(&t).unwrap();
    assert!(task.replica.starts_with("echo-"));
    // A replica's PATH: systemd's default for services, unless its spec's env sets one.
    let path = |j: &Job| j.spec.env.iter().filter(|(k, _)| k == "PATH").map(|(_, v)| v.clone()).collect::<Vec<_>>();
    assert_eq!(path(&t), vec![crate::services::REPLICA_PATH.to_string()]);
    let mut own = echo(1);
    own.name = "own".into();
    own.env.insert("PATH".into(), "/opt/model/bin:/usr/bin".into());
    w.apply(own).unwrap();
    w.round(200);
    let j = w.c.jobs().find(|j| j.replica.as_ref().is_some_and(|r| r.service == "own")).unwrap();
    assert_eq!(path(&j), vec!["/opt/model/bin:/usr/bin".to_string()]);
}

#[test]
fn silent_node_loses_its_replica_at_once_and_it_is_replaced_elsewhere() {
    let mut w = World::new(4, 0, Settings::default());
    w.apply(echo(3)).unwrap();
    for _ in 0..4 {
        w.round(200);
    }
    let victim = w.endpoints("echo")[0].node.clone();
    w.dead.push(victim.clone());
    // 2 s of silence: past the 1.5 s failover time (and time for the replacement to report
    // ready), far inside the 30 s lease.
    for _ in 0..10 {
        w.round(200);
    }
    let eps = w.endpoints("echo");
    assert_eq!(eps.len(), 3, "replaced: {eps:?}");
    assert!(eps.iter().all(|e| e.node != victim), "nothing on the silent node: {eps:?}");
    assert!(w.states("echo").contains(&ReplicaState::Lost));
    // The node comes back: its stale replica is stopped.
    w.dead.clear();
    for _ in 0..3 {
        w.round(200);
    }
    assert!(!w.states("echo").contains(&ReplicaState::Lost), "{:?}", w.states("echo"));
    assert!(w.running[&victim].is_empty());
}

#[test]
fn draining_waits_for_the_proxy_then_stops() {
    let mut w = World::new(2, 0, Settings::default());
    w.apply(echo(2)).unwrap();
    for _ in 0..4 {
        w.round(200);
    }
    let sync = |w: &mut World, since: u64, inflight: &[(&str, u64)]| {
        let mut st = ProxyServiceStats::default();
        for (r, n) in inflight {
            st.replicas.insert(r.to_string(), *n);
            st.inflight += n;
        }
        let now = w.now_ms;
        w.c.proxy_sync(now, "p1", since, BTreeMap::from([("echo".to_string(), st)]))
    };
    let v = sync(&mut w, 0, &[]);
    let gone = v.services[0].endpoints[1].replica.clone();
    // The proxy has 2 requests in flight on the replica that will go.
    sync(&mut w, v.version, &[(&gone, 2)]);
    w.c.scale_service(w.now_ms, 1000, "echo", 1).unwrap();
    w.round(200);
    let v2 = w.c.endpoint_view();
    assert_eq!(v2.services[0].endpoints.len(), 1);
    assert_eq!(v2.services[0].draining, vec![gone.clone()]);
    // The proxy saw the new view but its requests are still running: no stop yet.
    sync(&mut w, v2.version, &[(&gone, 2)]);
    w.round(200);
    assert!(w.signals.is_empty(), "stopped while requests were in flight");
    sync(&mut w, v2.version, &[(&gone, 0)]);
    w.round(200);
    w.round(200);
    assert_eq!(w.signals.len(), 1, "SIGTERM once drained");
    assert_eq!(w.states("echo"), vec![ReplicaState::Ready]);
}

#[test]
fn rolling_update_then_undo() {
    let mut w = World::new(3, 0, Settings::default());
    w.apply(echo(3)).unwrap();
    for _ in 0..4 {
        w.round(200);
    }
    let mut v2 = echo(3);
    v2.env.insert("VERSION".into(), "2".into());
    assert_eq!(w.apply(v2).unwrap(), (2, true));
    let mut min_ready = usize::MAX;
    for _ in 0..30 {
        w.round(200);
        min_ready = min_ready.min(w.endpoints("echo").len());
    }
    assert!(min_ready >= 2, "25% unavailable of 3 rounds down to 0: never fewer than 3 ready... got {min_ready}");
    let revs: Vec<u32> = w.c.replicas_of("echo").filter(|j| !j.state.is_final()).map(|j| j.replica.as_ref().unwrap().revision).collect();
    assert_eq!(revs, vec![2, 2, 2]);
    assert_eq!(w.c.undo_service(w.now_ms, 1000, "echo", None).unwrap(), 3);
    assert!(!w.c.service("echo").unwrap().spec.env.contains_key("VERSION"));
    for _ in 0..30 {
        w.round(200);
    }
    let live: Vec<&Job> = w.c.replicas_of("echo").filter(|j| !j.state.is_final()).collect();
    assert_eq!(live.len(), 3);
    assert!(live.iter().all(|j| !j.spec.env.iter().any(|(k, _)| k == "VERSION")));
    assert_eq!(w.c.undo_service(w.now_ms, 1000, "echo", Some(9)).unwrap_err().to_string(), "service echo has no revision 9 to go back to");
}

#[test]
fn gpu_service_preempts_lower_tier_training_only() {
    let mut settings = Settings::default();
    settings.cluster.qos = vec![
        qos("low", 0, 0),
        model::Qos { name: "serve".into(), priority: 100, preempt_tier: 2, grace_time: 5, ..model::Qos::normal() },
        qos("high", 200, 3),
    ];
    let mut w = World::new(2, 2, settings);
    let job = |q: &str| batch(&["--gpus-per-node=2", &format!("--qos={q}"), "-t", "60"]);
    let low = w.c.submit(1, spec(1), &job("low"), "bob").unwrap()[0];
    let high = w.c.submit(1, spec(1), &job("high"), "bob").unwrap()[0];
    w.c.tick(1);
    assert_eq!(w.c.job(low).unwrap().state, JobState::Running);
    assert_eq!(w.c.job(high).unwrap().state, JobState::Running);
    let mut svc = echo(1);
    svc.qos = Some("serve".into());
    svc.resources.gpus = Some(Quantity::Num(1.0));
    w.apply(svc).unwrap();
    w.round(200);
    assert!(w.c.job(low).unwrap().preempt_at.is_some(), "the low-tier job was chosen");
    let by = w.c.replicas_of("echo").next().unwrap().req.id.0;
    assert_eq!(w.c.job(low).unwrap().preempted_by, Some(by), "its preemptor is kept for its message");
    assert!(w.c.job(high).unwrap().preempt_at.is_none(), "the high-tier job is never a victim of a lower tier");
    // The batch job's launch was never delivered to the fake agent, so it is requeued when its
    // grace time ends.
    for _ in 0..40 {
        w.round(200);
    }
    assert_eq!(w.c.job(low).unwrap().state, JobState::Pending);
    assert_eq!(w.c.job(low).unwrap().restart_count, 1);
    assert_eq!(w.endpoints("echo").len(), 1);
    // The service goes away: the training job gets its GPUs back at once.
    w.c.delete_service(1000, "echo").unwrap();
    for _ in 0..5 {
        w.round(200);
    }
    assert!(w.c.service("echo").is_none());
    assert_eq!(w.c.job(low).unwrap().state, JobState::Running);
}

#[test]
fn autoscaler_follows_the_proxies() {
    let mut w = World::new(4, 0, Settings::default());
    let spec = ServiceSpec {
        name: "echo".into(),
        command: vec!["x".into()],
        autoscale: Some(AutoscaleSpec {
            min: Some(Quantity::Num(1.0)),
            max: Some(Quantity::Num(4.0)),
            target_inflight: Some(Quantity::Num(2.0)),
            scale_down_window: Some(Quantity::Text("2s".into())),
        }),
        ..Default::default()
    };
    w.apply(spec).unwrap();
    w.round(200);
    let load = |w: &mut World, n: u64| {
        let now = w.now_ms;
        let st = ProxyServiceStats { inflight: n, ..Default::default() };
        let v = w.c.endpoint_version();
        w.c.proxy_sync(now, "p", v, BTreeMap::from([("echo".to_string(), st)]));
    };
    load(&mut w, 7);
    w.round(200);
    assert_eq!(w.c.service("echo").unwrap().desired, 4);
    load(&mut w, 0);
    w.round(1000);
    assert_eq!(w.c.service("echo").unwrap().desired, 4, "no scale-down inside the window");
    for _ in 0..3 {
        load(&mut w, 0);
        w.round(1000);
    }
    assert_eq!(w.c.service("echo").unwrap().desired, 1);
    let log = &w.c.service("echo").unwrap().scale_log;
    assert_eq!(log.iter().map(|(_, n)| *n).collect::<Vec<_>>(), vec![1, 4, 1]);
}

#[test]
fn refused_specs_store_nothing() {
    let mut w = World::new(1, 0, Settings::default());
    let mut s = echo(1);
    s.qos = Some("nope".into());
    assert!(w.apply(s).unwrap_err().to_string().to_lowercase().contains("invalid qos"));
    let mut s = echo(1);
    s.resources.cpus = Some(Quantity::Num(64.0));
    assert!(matches!(w.apply(s), Err(Refused::Invalid(_))));
    assert!(w.c.services().next().is_none());
    assert!(w.c.take_dirty().services.is_empty());
    w.apply(echo(1)).unwrap();
    assert!(matches!(w.c.apply_service(w.now_ms, 2000, 2000, "eve", "/tmp", echo(2)), Err(Refused::Forbidden(_))));
    assert!(matches!(w.c.scale_service(w.now_ms, 2000, "echo", 3), Err(Refused::Forbidden(_))));
    assert!(matches!(w.c.delete_service(2000, "echo"), Err(Refused::Forbidden(_))));
}

#[test]
fn min_available_holds_against_preemption() {
    let mut settings = Settings::default();
    settings.cluster.qos = vec![qos("low", 0, 0), qos("high", 200, 3)];
    let mut w = World::new(2, 1, settings);
    let mut svc = echo(2);
    svc.qos = Some("low".into());
    svc.resources.gpus = Some(Quantity::Num(1.0));
    svc.min_available = Some(Quantity::Num(2.0));
    w.apply(svc).unwrap();
    for _ in 0..4 {
        w.round(200);
    }
    assert_eq!(w.endpoints("echo").len(), 2);
    let high = w.c.submit(1, spec(1), &batch(&["--gpus-per-node=1", "--qos=high"]), "bob").unwrap()[0];
    for _ in 0..4 {
        w.round(200);
    }
    assert_eq!(w.c.job(high).unwrap().state, JobState::Pending, "min_available = 2 of 2: no replica may go");
    assert_eq!(w.endpoints("echo").len(), 2);
    // With min_available 1, one replica may be preempted.
    let mut svc = w.c.service("echo").unwrap().spec.clone();
    svc.min_available = Some(Quantity::Num(1.0));
    assert_eq!(w.apply(svc).unwrap(), (1, true), "no new revision: what runs is the same");
    for _ in 0..60 {
        w.round(200);
    }
    assert_eq!(w.c.job(high).unwrap().state, JobState::Running);
}

#[test]
fn when_most_nodes_go_silent_at_once_nothing_fails_over() {
    // A controller that could not keep up sees every heartbeat late: that is not three dead
    // nodes, and replacing every replica at once would only add load.
    let mut w = World::new(3, 0, Settings::default());
    w.apply(echo(3)).unwrap();
    for _ in 0..4 {
        w.round(200);
    }
    w.dead = w.nodes.clone();
    for _ in 0..10 {
        w.round(200);
    }
    assert!(!w.states("echo").contains(&ReplicaState::Lost), "{:?}", w.states("echo"));
    assert_eq!(w.endpoints("echo").len(), 3);
    // One node of three silent is a failure: it fails over.
    w.dead = vec![w.nodes[0].clone()];
    for _ in 0..12 {
        w.round(200);
    }
    assert!(w.states("echo").contains(&ReplicaState::Lost), "{:?}", w.states("echo"));
}

#[test]
fn a_maintenance_window_moves_replicas_off_its_node_first_within_min_available() {
    // Three nodes, two replicas (one per node by spreading), both must stay available.
    let mut w = World::new(3, 0, Settings::default());
    let mut s = echo(2);
    s.min_available = Some(Quantity::Num(2.0));
    w.apply(s).unwrap();
    for _ in 0..4 {
        w.round(200);
    }
    let on = |w: &World| -> Vec<String> {
        let mut v: Vec<String> = w.endpoints("echo").iter().map(|e| e.node.clone()).collect();
        v.sort();
        v
    };
    let before = on(&w);
    assert_eq!(before.len(), 2);
    let victim = before[0].clone();
    // A maintenance on that node, starting in 20 minutes: not yet within the lead time.
    let spec = slurmcli::resv::ResvSpec {
        name: Some("m".into()),
        start: Some(w.now_ms / 1000 + 1200),
        duration: Some(1800),
        nodes: Some(vec![victim.clone()]),
        users: Some(slurmcli::resv::ListChange { op: slurmcli::resv::ListOp::Set, negated: false, names: vec!["root".into()] }),
        flags_set: vec!["MAINT".into(), "IGNORE_JOBS".into()],
        ..Default::default()
    };
    w.c.create_reservation(w.now_ms / 1000, 0, &spec).unwrap();
    for _ in 0..4 {
        w.round(200);
    }
    assert_eq!(on(&w), before, "20 minutes ahead, nothing moves");
    // Within the lead time: a replacement starts elsewhere first, then the replica on the node
    // leaves; the service never drops below its two ready replicas.
    w.now_ms += (1200 - model::resv::REPLICA_LEAD + 10) * 1000;
    for _ in 0..20 {
        w.round(200);
        assert!(w.endpoints("echo").len() >= 2, "min_available holds: {:?}", w.endpoints("echo"));
    }
    let after = on(&w);
    assert!(!after.contains(&victim) && after.len() == 2, "{after:?}");
}

#[test]
fn a_namespace_is_its_owners_and_deleting_it_deletes_what_is_in_it() {
    use crate::kube::{KubeObject, namespace_key};
    let mut w = World::new(2, 0, Settings::default());
    let obj = |kind: &str, ns: &str, name: &str, uid: u32| KubeObject {
        kind: kind.into(),
        namespace: ns.into(),
        name: name.into(),
        uid,
        created: 0,
        data: serde_json::json!({}),
    };
    let named = |name: &str| ServiceSpec { name: name.into(), ..echo(1) };
    // Nothing is made in a namespace that does not exist.
    assert!(matches!(w.apply(named("echo.team-a")), Err(Refused::NotFound(m)) if m.contains("kubectl create namespace team-a")));
    assert!(matches!(w.c.put_kube_object(1000, obj("ConfigMap", "team-a", "cfg", 1000)), Err(Refused::NotFound(_))));
    assert!(matches!(w.c.put_kube_object(1000, obj("Namespace", "", "default", 1000)), Err(Refused::Invalid(_))));
    w.c.put_kube_object(1000, obj("Namespace", "", "team-a", 1000)).unwrap();
    // Another user makes nothing in it, as a service or as an object, nor deletes it.
    assert!(matches!(w.c.apply_service(0, 2000, 2000, "mallory", "/tmp", named("echo.team-a")), Err(Refused::Forbidden(_))));
    assert!(matches!(w.c.put_kube_object(2000, obj("Secret", "team-a", "s", 2000)), Err(Refused::Forbidden(_))));
    assert!(matches!(w.c.put_kube_object(2000, obj("Namespace", "", "team-a", 2000)), Err(Refused::Forbidden(_))));
    assert!(matches!(w.c.delete_namespace(0, 2000, "team-a"), Err(Refused::Forbidden(_))));
    assert!(matches!(w.c.delete_namespace(0, 1000, "default"), Err(Refused::Forbidden(_))));
    // Its owner does; a service of the same name in default is another service.
    w.apply(named("echo.team-a")).unwrap();
    w.apply(named("echo")).unwrap();
    w.c.put_kube_object(1000, obj("ConfigMap", "team-a", "cfg", 1000)).unwrap();
    w.c.put_kube_object(1000, obj("ConfigMap", "default", "cfg", 1000)).unwrap();
    for _ in 0..5 {
        w.round(200);
    }
    assert_eq!((w.endpoints("echo.team-a").len(), w.endpoints("echo").len()), (1, 1));
    // Deleted: what is in it goes, the rest stays; it is terminating until its replicas stop.
    w.c.delete_namespace(0, 1000, "team-a").unwrap();
    let cm = |ns: &str| ("ConfigMap".to_string(), ns.to_string(), "cfg".to_string());
    assert!(w.c.kube_object(&cm("team-a")).is_none() && w.c.kube_object(&cm("default")).is_some());
    assert!(w.c.kube_object(&namespace_key("team-a")).is_some_and(KubeObject::terminating));
    assert!(matches!(w.apply(named("other.team-a")), Err(Refused::Forbidden(m)) if m.contains("terminated")));
    for _ in 0..10 {
        w.round(200);
    }
    assert!(w.c.service("echo.team-a").is_none() && w.c.service("echo").is_some());
    assert!(w.c.kube_object(&namespace_key("team-a")).is_none(), "gone with its last service");
    // The name is free again, for anyone.
    w.c.put_kube_object(2000, obj("Namespace", "", "team-a", 2000)).unwrap();
}
