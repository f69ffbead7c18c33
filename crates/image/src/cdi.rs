//! GPUs in containers through the Container Device Interface (CDI): the specifications that
//! NVIDIA's container toolkit writes (`nvidia-ctk cdi generate`, `/etc/cdi/nvidia.yaml`, or
//! `/var/run/cdi`), YAML or JSON. A task gets the edits common to the specification's kind and
//! those of its own GPUs only, named by index (`0`, `1`, ...): device nodes and files become
//! bind mounts (a container in a user namespace cannot make device nodes), variables are set,
//! hooks are passed to the runtime; and `CUDA_VISIBLE_DEVICES` lists the GPUs as the container
//! numbers them (`0..n`).

use oci_spec::runtime::{Hook, HookBuilder, HooksBuilder, MountBuilder, Spec};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Where CDI specifications are looked for when none is configured (CDI's defaults).
pub const DEFAULT_DIRS: &[&str] = &["/etc/cdi", "/var/run/cdi"];

/// One CDI specification file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiSpec {
    /// `vendor/class`, e.g. `nvidia.com/gpu`.
    pub kind: String,
    /// The devices.
    #[serde(default)]
    pub devices: Vec<Device>,
    /// Edits every device of the kind needs.
    #[serde(default)]
    pub container_edits: Edits,
}

/// A device of a specification.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    /// Its name (`0`, `GPU-...`, `all`).
    pub name: String,
    /// Its edits.
    #[serde(default)]
    pub container_edits: Edits,
}

/// What a device adds to a container.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Edits {
    /// `NAME=VALUE`.
    #[serde(default)]
    pub env: Vec<String>,
    /// Device nodes.
    #[serde(default)]
    pub device_nodes: Vec<DeviceNode>,
    /// Files and directories.
    #[serde(default)]
    pub mounts: Vec<CdiMount>,
    /// Runtime hooks.
    #[serde(default)]
    pub hooks: Vec<CdiHook>,
}

/// A device node.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceNode {
    /// Path inside.
    pub path: String,
    /// Path on the host (default: `path`).
    #[serde(default)]
    pub host_path: Option<String>,
}

/// A mount.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiMount {
    /// Host path.
    pub host_path: String,
    /// Path inside.
    pub container_path: String,
    /// Mount options.
    #[serde(default)]
    pub options: Vec<String>,
}

/// A hook.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiHook {
    /// `createRuntime`, `createContainer`, `startContainer`, `poststart`, `poststop`.
    pub hook_name: String,
    /// Program.
    pub path: String,
    /// Arguments (with the program's name first).
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment.
    #[serde(default)]
    pub env: Vec<String>,
}

/// Reads the GPU specifications (`nvidia.com/gpu`, or any kind ending in `/gpu`) of `dirs`:
/// every `.yaml`, `.yml` and `.json` file; one that cannot be read is named in the error.
pub fn load_gpu_specs(dirs: &[PathBuf]) -> Result<Vec<CdiSpec>, String> {
    let mut out = Vec::new();
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(d) else { continue };
        let mut files: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        files.sort();
        for f in files {
            let ext = f.extension().and_then(|e| e.to_str()).unwrap_or("");
            if !matches!(ext, "yaml" | "yml" | "json") {
                continue;
            }
            let text = std::fs::read_to_string(&f).map_err(|e| format!("CDI specification {}: {e}", f.display()))?;
            let spec: CdiSpec = if ext == "json" {
                serde_json::from_str(&text).map_err(|e| format!("CDI specification {}: {e}", f.display()))?
            } else {
                yaml_serde::from_str(&text).map_err(|e| format!("CDI specification {}: {e}", f.display()))?
            };
            if spec.kind.ends_with("/gpu") {
                out.push(spec);
            }
        }
    }
    Ok(out)
}

fn bind(src: &str, dst: &str, readonly: bool) -> oci_spec::runtime::Mount {
    let mut options = vec!["rbind".to_string(), "nosuid".to_string()];
    if readonly {
        options.push("ro".to_string());
    }
    MountBuilder::default().destination(dst).typ("none").source(src).options(options).build().expect("complete")
}

fn hook(h: &CdiHook) -> Hook {
    let mut b = HookBuilder::default().path(PathBuf::from(&h.path));
    if !h.args.is_empty() {
        b = b.args(h.args.clone());
    }
    if !h.env.is_empty() {
        b = b.env(h.env.clone());
    }
    b.build().expect("complete")
}

/// Sets `CUDA_VISIBLE_DEVICES` of `spec`'s process to the task's GPUs (`mine`, host indices)
/// as the container numbers them: its devices are the job's GPUs (`all`), from 0 in that order.
pub fn visible(spec: &mut Spec, all: &[u8], mine: &[u8]) {
    let list = mine.iter().filter_map(|g| all.iter().position(|a| a == g)).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    let mut process = spec.process().clone().unwrap_or_default();
    let mut env = process.env().clone().unwrap_or_default();
    env.retain(|x| !x.starts_with("CUDA_VISIBLE_DEVICES="));
    env.push(format!("CUDA_VISIBLE_DEVICES={list}"));
    process.set_env(Some(env));
    spec.set_process(Some(process));
}

/// Gives the container the GPUs `gpus` (host indices) of `specs`, and only those; an index no
/// specification names is an error (the job would otherwise run without its GPU).
pub fn apply(spec: &mut Spec, specs: &[CdiSpec], gpus: &[u8]) -> Result<(), String> {
    if gpus.is_empty() {
        return Ok(());
    }
    let mut edits: Vec<&Edits> = Vec::new();
    let mut kinds_used = Vec::new();
    for g in gpus {
        let name = g.to_string();
        let found = specs.iter().find_map(|s| s.devices.iter().find(|d| d.name == name).map(|d| (s, d)));
        let Some((s, d)) = found else {
            return Err(format!("GPU {g} is in no CDI specification (nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml makes one)"));
        };
        if !kinds_used.contains(&s.kind) {
            kinds_used.push(s.kind.clone());
            edits.push(&s.container_edits);
        }
        edits.push(&d.container_edits);
    }
    let mut mounts = spec.mounts().clone().unwrap_or_default();
    let mut process = spec.process().clone().unwrap_or_default();
    let mut env = process.env().clone().unwrap_or_default();
    let mut hooks = spec.hooks().clone().unwrap_or_default();
    let (mut create_runtime, mut create_container, mut start_container, mut poststart, mut poststop) = (
        hooks.create_runtime().clone().unwrap_or_default(),
        hooks.create_container().clone().unwrap_or_default(),
        hooks.start_container().clone().unwrap_or_default(),
        hooks.poststart().clone().unwrap_or_default(),
        hooks.poststop().clone().unwrap_or_default(),
    );
    for e in edits {
        for n in &e.device_nodes {
            mounts.push(bind(n.host_path.as_deref().unwrap_or(&n.path), &n.path, false));
        }
        for m in &e.mounts {
            mounts.push(bind(&m.host_path, &m.container_path, m.options.iter().any(|o| o == "ro")));
        }
        for kv in &e.env {
            if let Some((k, _)) = kv.split_once('=') {
                env.retain(|x| x.split_once('=').map(|(a, _)| a) != Some(k));
                env.push(kv.clone());
            }
        }
        for h in &e.hooks {
            let list = match h.hook_name.as_str() {
                "createRuntime" => &mut create_runtime,
                "createContainer" => &mut create_container,
                "startContainer" => &mut start_container,
                "poststart" => &mut poststart,
                "poststop" => &mut poststop,
                other => return Err(format!("CDI hook {other:?} is not an OCI hook")),
            };
            list.push(hook(h));
        }
    }
    // The container numbers its GPUs from 0.
    let visible = (0..gpus.len()).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    env.retain(|x| !x.starts_with("CUDA_VISIBLE_DEVICES="));
    env.push(format!("CUDA_VISIBLE_DEVICES={visible}"));
    process.set_env(Some(env));
    spec.set_process(Some(process));
    spec.set_mounts(Some(mounts));
    hooks = HooksBuilder::default()
        .create_runtime(create_runtime)
        .create_container(create_container)
        .start_container(start_container)
        .poststart(poststart)
        .poststop(poststop)
        .build()
        .expect("complete");
    spec.set_hooks(Some(hooks));
    Ok(())
}

/// The specification directories: `dirs` if any, else [`DEFAULT_DIRS`].
pub fn dirs_or_default(dirs: &[PathBuf]) -> Vec<PathBuf> {
    if dirs.is_empty() { DEFAULT_DIRS.iter().map(|d| Path::new(d).to_path_buf()).collect() } else { dirs.to_vec() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAKE: &str = r#"
cdiVersion: "0.5.0"
kind: nvidia.com/gpu
devices:
  - name: "0"
    containerEdits:
      deviceNodes: [{path: /dev/nvidia0, hostPath: /dev/null}]
  - name: "1"
    containerEdits:
      deviceNodes: [{path: /dev/nvidia1, hostPath: /dev/null}]
  - name: all
    containerEdits:
      deviceNodes: [{path: /dev/nvidia0}, {path: /dev/nvidia1}]
containerEdits:
  env: [NVIDIA_VISIBLE_DEVICES=void]
  deviceNodes: [{path: /dev/nvidiactl, hostPath: /dev/null}]
  mounts: [{hostPath: /usr/lib/libcuda.so.1, containerPath: /usr/lib/libcuda.so.1, options: [ro, nosuid, nodev, bind]}]
  hooks: [{hookName: createContainer, path: /usr/bin/nvidia-cdi-hook, args: [nvidia-cdi-hook, update-ldcache]}]
"#;

    #[test]
    fn only_the_tasks_gpus_and_the_common_edits_numbered_from_zero() {
        let s: CdiSpec = yaml_serde::from_str(FAKE).unwrap();
        let mut spec = Spec::default();
        apply(&mut spec, std::slice::from_ref(&s), &[1]).unwrap();
        let m = spec.mounts().clone().unwrap();
        let dst: Vec<String> = m.iter().map(|m| m.destination().display().to_string()).collect();
        assert!(dst.contains(&"/dev/nvidia1".to_string()) && !dst.contains(&"/dev/nvidia0".to_string()), "{dst:?}");
        assert!(dst.contains(&"/dev/nvidiactl".to_string()) && dst.contains(&"/usr/lib/libcuda.so.1".to_string()));
        let env = spec.process().as_ref().unwrap().env().clone().unwrap();
        assert!(env.contains(&"CUDA_VISIBLE_DEVICES=0".to_string()) && env.contains(&"NVIDIA_VISIBLE_DEVICES=void".to_string()), "{env:?}");
        assert_eq!(spec.hooks().as_ref().unwrap().create_container().as_ref().unwrap().len(), 1);
        let mut spec = Spec::default();
        apply(&mut spec, std::slice::from_ref(&s), &[0, 1]).unwrap();
        assert!(spec.process().as_ref().unwrap().env().clone().unwrap().contains(&"CUDA_VISIBLE_DEVICES=0,1".to_string()));
        // The common edits once, not per GPU.
        assert_eq!(spec.mounts().clone().unwrap().iter().filter(|m| m.destination().to_str() == Some("/dev/nvidiactl")).count(), 1);
        let e = apply(&mut Spec::default(), &[s], &[5]).unwrap_err();
        assert!(e.contains("GPU 5"), "{e}");
        // No GPUs: nothing changes.
        let mut spec = Spec::default();
        let before = spec.clone();
        apply(&mut spec, &[], &[]).unwrap();
        assert_eq!(spec, before);
    }

    #[test]
    fn a_task_sees_its_gpus_numbered_as_the_container_has_them() {
        let mut spec = Spec::default();
        visible(&mut spec, &[1, 3, 6], &[6, 3]);
        let env = spec.process().as_ref().unwrap().env().clone().unwrap();
        assert!(env.contains(&"CUDA_VISIBLE_DEVICES=2,1".to_string()), "{env:?}");
        // Not the job's: left out.
        visible(&mut spec, &[1], &[4]);
        let env = spec.process().as_ref().unwrap().env().clone().unwrap();
        assert_eq!(env.iter().filter(|e| e.starts_with("CUDA_VISIBLE_DEVICES=")).collect::<Vec<_>>(), ["CUDA_VISIBLE_DEVICES="]);
    }
}
