//! The Kubernetes API's view of Tandem's state, as pure functions: no IO, no clock (the caller
//! passes `now`), no randomness. The controller (`server`'s `kube` module) gathers its own
//! views (`wire::JobInfo`, `wire::ServiceInfo`, `wire::NodeInfo`) under its lock and asks this
//! crate what `kubectl` and the Python client should see:
//!
//! - [`api`]: the resources served, discovery documents (`/api`, `/apis`, resource lists,
//!   `/version`) and the parsing of a request's path into what it names;
//! - [`objects`]: Kubernetes objects built from Tandem's views (a service is a Deployment with
//!   a ReplicaSet per revision and a Pod per replica; a batch job, or an array, is a Job with a
//!   Pod per task and node; a node is a Node), every field derived from the ledger;
//! - [`table`]: the server-side `Table` that `kubectl get` asks for, with kubectl's columns;
//! - [`select`]: label and field selectors;
//! - [`status`]: `metav1.Status` errors with Kubernetes' reasons and codes;
//! - [`watch`]: resource versions for computed objects, and the events of a watch;
//! - [`write`]: a Deployment written by a client, checked and turned into a service spec;
//! - [`patch`]: JSON merge patch, JSON Patch and strategic merge patch;
//! - [`openapi`]: `/openapi/v3`, generated from the types and the resources served;
//! - [`exec`]: `pods/exec`'s options and WebSocket channel messages (`kubectl exec`, `cp`);
//! - [`proto`]: protobuf request bodies (`kubectl create configmap|secret|deployment`).
//!
//! Objects are `k8s-openapi`'s types, so every field name and shape is upstream's.

pub mod api;
pub mod exec;
pub mod jobs;
pub mod objects;
pub mod openapi;
pub mod patch;
pub mod proto;
pub mod select;
pub mod status;
pub mod table;
pub mod watch;
pub mod write;

pub use api::{RESOURCES, Resource, Route, Target};
pub use status::Failure;

/// The namespace of every `sbatch` job's Job and Pods, and of services without one in their name
/// (README, "For Kubernetes users").
pub use wire::DEFAULT_NAMESPACE;

/// Kubernetes' default `backoffLimit` of a Job.
pub const DEFAULT_BACKOFF_LIMIT: u32 = 6;

/// The prefix of Tandem's own labels and annotations.
pub const PREFIX: &str = "tandem.dev";
