//! The job-submit hook's child (`tandem __job-submit SCRIPT MEMORY_MB CLUSTER`): an embedded
//! Lua 5.1 (mlua's vendored copy: the version Debian's and most distributions' Slurm packages
//! link) with Slurm's `job_submit/lua` interface: the `slurm` table (`log_user`, `user_msg`,
//! `log_info` and its siblings, `error`, `time_str2mins`, `SUCCESS`, `ERROR`, `ESLURM_*`,
//! `NO_VAL`/`NO_VAL16`/`NO_VAL64`, `INFINITE`, `MEM_PER_CPU`, `CLUSTER_NAME`...), and for each
//! call a `job_desc` whose fields read as Slurm's (unset numbers `NO_VAL`, unset strings nil)
//! and whose writable fields record what the script sets. It loads the script once, says so on
//! its first line, then answers calls (one JSON line each) until its input closes. Lua's
//! `print` goes to the controller's log, not into the answers.

use crate::hook::{Answer, Call, CallKind, Loaded};
use mlua::{Lua, Table, Value as LuaValue};
use slurmcli::jobdesc::{self, Fields, Value};
use std::cell::RefCell;
use std::io::{BufRead, Write};
use std::rc::Rc;

/// Slurm's level names of `slurm.log(level, msg)` (`log_info` is 0).
const LEVELS: &[&str] = &["info", "verbose", "debug", "debug2", "debug3", "debug4", "debug5"];

/// Lua run once before the script: Slurm's formatting wrappers and the `job_desc` maker.
const PRELUDE: &str = r#"
local fmt, unpack = string.format, unpack
slurm.log_user = function(...) slurm.user_msg(fmt(...)) end
slurm.log_error = function(...) slurm.error(fmt(...)) end
slurm.log_info = function(...) slurm.log(0, fmt(...)) end
slurm.log_verbose = function(...) slurm.log(1, fmt(...)) end
slurm.log_debug = function(...) slurm.log(2, fmt(...)) end
slurm.log_debug2 = function(...) slurm.log(3, fmt(...)) end
slurm.log_debug3 = function(...) slurm.log(4, fmt(...)) end
slurm.log_debug4 = function(...) slurm.log(5, fmt(...)) end
print = function(...)
  local t = {}
  for i = 1, select('#', ...) do t[#t + 1] = tostring((select(i, ...))) end
  slurm.log(0, "print: " .. table.concat(t, "\t"))
end
local function check(k, v)
  local t = type(v)
  if t ~= "string" and t ~= "number" and t ~= "boolean" then
    error(fmt("bad argument #3 to '_set_job_req_field' (string or number expected, got %s) for field %s", t, tostring(k)), 3)
  end
  if t == "number" and (v ~= v or v == math.huge or v == -math.huge) then
    error(fmt("bad argument #3 to '_set_job_req_field' (a finite number expected) for field %s", tostring(k)), 3)
  end
end
function __tandem_desc(fields, writable, env)
  local changed, env_changed = {}, {}
  local envt = nil
  if env ~= nil then
    envt = setmetatable({}, {
      __index = function(_, k) return env[k] end,
      __newindex = function(_, k, v)
        if v ~= nil then v = tostring(v) end
        env[tostring(k)] = v
        env_changed[tostring(k)] = true
      end,
    })
  end
  local desc = setmetatable({}, {
    __index = function(_, k)
      if k == "environment" then return envt end
      return fields[k]
    end,
    __newindex = function(_, k, v)
      if not writable[k] then
        slurm.error("_set_job_field: unrecognized field: " .. tostring(k))
        return
      end
      check(k, v)
      fields[k] = v
      changed[k] = true
    end,
  })
  return desc, changed, env_changed
end
"#;

/// What the script's calls to `slurm.*` collect during one call.
#[derive(Default)]
struct Sink {
    user_msg: Vec<String>,
    log: Vec<(String, String)>,
}

/// Runs the child; returns its exit code.
pub fn worker_main(args: &[String]) -> i32 {
    let [script, memory, cluster] = args else {
        eprintln!("usage: tandem {} SCRIPT MEMORY_MB CLUSTER", crate::hook::WORKER_CMD);
        return 2;
    };
    let Ok(memory_mb) = memory.parse::<u64>() else {
        eprintln!("tandem {}: MEMORY_MB must be a number", crate::hook::WORKER_CMD);
        return 2;
    };
    // Die with the controller, even in the middle of a runaway call.
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    if nix::unistd::getppid().as_raw() == 1 {
        return 1;
    }
    // The address space is the backstop behind Lua's own allocator limit.
    let bytes = (memory_mb + 1024) << 20;
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_AS, bytes, bytes);
    // Answers go to the original standard output; anything the script writes goes to the log.
    let answers = match std::os::fd::AsFd::as_fd(&std::io::stdout()).try_clone_to_owned() {
        Ok(fd) => std::fs::File::from(fd),
        Err(e) => {
            eprintln!("tandem {}: {e}", crate::hook::WORKER_CMD);
            return 1;
        }
    };
    let _ = nix::unistd::dup2_stdout(std::io::stderr());
    let mut answers = std::io::BufWriter::new(answers);
    let sink = Rc::new(RefCell::new(Sink::default()));
    let lua = Lua::new();
    let loaded = load(&lua, script, memory_mb, cluster, &sink);
    let ok = loaded.is_ok();
    let first = Loaded { error: loaded.err() };
    if writeln!(answers, "{}", serde_json::to_string(&first).unwrap_or_default()).and_then(|()| answers.flush()).is_err() || !ok {
        return if ok { 1 } else { 0 };
    }
    let stdin = std::io::stdin();
    let mut line = String::new();
    loop {
        line.clear();
        match stdin.lock().read_line(&mut line) {
            Ok(0) | Err(_) => return 0,
            Ok(_) => {}
        }
        let answer = match serde_json::from_str::<Call>(&line) {
            Ok(call) => run(&lua, &call, &sink),
            Err(e) => Answer { error: Some(format!("unreadable call: {e}")), ..Answer::default() },
        };
        let text = serde_json::to_string(&answer).unwrap_or_else(|e| format!("{{\"rc\":-1,\"error\":\"cannot encode the answer: {e}\"}}"));
        if writeln!(answers, "{text}").and_then(|()| answers.flush()).is_err() {
            return 0;
        }
    }
}

/// Sets the `slurm` table up, runs the prelude and the script, and checks its two functions.
fn load(lua: &Lua, script: &str, memory_mb: u64, cluster: &str, sink: &Rc<RefCell<Sink>>) -> Result<(), String> {
    let e = |e: mlua::Error| e.to_string();
    let _ = lua.set_memory_limit(usize::try_from(memory_mb << 20).unwrap_or(usize::MAX));
    let slurm = lua.create_table().map_err(e)?;
    let consts: &[(&str, f64)] = &[
        ("NO_VAL", jobdesc::NO_VAL),
        ("NO_VAL8", jobdesc::NO_VAL8),
        ("NO_VAL16", jobdesc::NO_VAL16),
        ("NO_VAL64", jobdesc::NO_VAL64),
        ("INFINITE", jobdesc::INFINITE),
        ("INFINITE16", jobdesc::INFINITE16),
        ("INFINITE64", jobdesc::INFINITE64),
        ("MEM_PER_CPU", jobdesc::MEM_PER_CPU),
        ("NICE_OFFSET", jobdesc::NICE_OFFSET),
        ("ALLOC_SID_ADMIN_HOLD", 1.0),
        ("ALLOC_SID_USER_HOLD", 2.0),
        ("JOB_SHARED_NONE", 0.0),
        ("JOB_SHARED_OK", 1.0),
        ("JOB_SHARED_USER", 2.0),
        ("JOB_SHARED_MCS", 3.0),
        ("MAIL_JOB_BEGIN", 1.0),
        ("MAIL_JOB_END", 2.0),
        ("MAIL_JOB_FAIL", 4.0),
        ("MAIL_JOB_REQUEUE", 8.0),
        ("MAIL_JOB_TIME100", 16.0),
        ("MAIL_JOB_TIME90", 32.0),
        ("MAIL_JOB_TIME80", 64.0),
        ("MAIL_JOB_TIME50", 128.0),
        ("MAIL_JOB_STAGE_OUT", 256.0),
        ("MAIL_INVALID_DEPEND", 4096.0),
    ];
    for (k, v) in consts {
        slurm.set(*k, *v).map_err(e)?;
    }
    for (k, n, _) in jobdesc::RETURN_CODES {
        slurm.set(*k, *n as f64).map_err(e)?;
    }
    slurm.set("CLUSTER_NAME", cluster).map_err(e)?;
    let s = sink.clone();
    let log = lua
        .create_function(move |_, (level, msg): (f64, mlua::LuaString)| {
            let name = LEVELS.get(level.max(0.0) as usize).copied().unwrap_or("debug5");
            s.borrow_mut().log.push((name.into(), msg.to_string_lossy()));
            Ok(())
        })
        .map_err(e)?;
    slurm.set("log", log).map_err(e)?;
    let s = sink.clone();
    let error = lua
        .create_function(move |_, msg: mlua::LuaString| {
            s.borrow_mut().log.push(("error".into(), msg.to_string_lossy()));
            Ok(())
        })
        .map_err(e)?;
    slurm.set("error", error).map_err(e)?;
    let s = sink.clone();
    let user_msg = lua
        .create_function(move |_, msg: mlua::LuaString| {
            s.borrow_mut().user_msg.push(msg.to_string_lossy());
            Ok(())
        })
        .map_err(e)?;
    slurm.set("user_msg", user_msg).map_err(e)?;
    let mins = lua
        .create_function(|_, t: mlua::LuaString| {
            Ok(match slurmcli::parse_time(&t.to_string_lossy()) {
                Ok(None) => jobdesc::INFINITE,
                Ok(Some(secs)) => (secs as f64 / 60.0).ceil(),
                Err(_) => jobdesc::NO_VAL,
            })
        })
        .map_err(e)?;
    slurm.set("time_str2mins", mins).map_err(e)?;
    lua.globals().set("slurm", slurm).map_err(e)?;
    lua.load(PRELUDE).set_name("=tandem-prelude").exec().map_err(e)?;
    let text = std::fs::read(script).map_err(|err| format!("{script}: {err}"))?;
    lua.load(&text[..]).set_name(format!("@{script}")).exec().map_err(e)?;
    for (level, msg) in std::mem::take(&mut sink.borrow_mut().log) {
        eprintln!("tandem server: job_submit/lua: {level}: {}", slurmcli::visible(&msg));
    }
    for f in ["slurm_job_submit", "slurm_job_modify"] {
        if !matches!(lua.globals().get::<LuaValue>(f).map_err(e)?, LuaValue::Function(_)) {
            return Err(format!("{script}: missing required function {f}"));
        }
    }
    Ok(())
}

fn to_lua(lua: &Lua, v: &Value) -> mlua::Result<LuaValue> {
    Ok(match v {
        Value::Num(n) => LuaValue::Number(*n),
        Value::Str(s) => LuaValue::String(lua.create_string(s)?),
        Value::Bool(b) => LuaValue::Boolean(*b),
    })
}

fn from_lua(v: &LuaValue) -> Option<Value> {
    match v {
        LuaValue::Number(n) if n.is_finite() => Some(Value::Num(*n)),
        LuaValue::Integer(n) => Some(Value::Num(*n as f64)),
        LuaValue::String(s) => Some(Value::Str(s.to_string_lossy())),
        LuaValue::Boolean(b) => Some(Value::Bool(*b)),
        _ => None,
    }
}

fn table(lua: &Lua, f: &Fields) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    for (k, v) in f {
        t.set(k.as_str(), to_lua(lua, v)?)?;
    }
    Ok(t)
}

/// One call of the script.
fn run(lua: &Lua, call: &Call, sink: &Rc<RefCell<Sink>>) -> Answer {
    *sink.borrow_mut() = Sink::default();
    let result = call_script(lua, call);
    let mut s = sink.borrow_mut();
    let (user_msg, log) = (std::mem::take(&mut s.user_msg), std::mem::take(&mut s.log));
    // A call's garbage goes before the next call.
    let _ = lua.gc_collect();
    match result {
        Ok(mut a) => {
            a.user_msg = user_msg;
            a.log = log;
            a
        }
        Err(e) => Answer { rc: -1, error: Some(e.to_string()), user_msg, log, ..Answer::default() },
    }
}

fn call_script(lua: &Lua, call: &Call) -> mlua::Result<Answer> {
    let fields = table(lua, &call.job_desc)?;
    let writable = lua.create_table()?;
    for k in jobdesc::WRITABLE {
        writable.set(*k, true)?;
    }
    let env = match &call.environment {
        Some(env) => {
            let t = lua.create_table()?;
            for (k, v) in env {
                t.set(k.as_str(), v.as_str())?;
            }
            Some(t)
        }
        None => None,
    };
    let make: mlua::Function = lua.globals().get("__tandem_desc")?;
    let (desc, changed, env_changed): (Table, Table, Table) = make.call((fields.clone(), writable, env.clone()))?;
    let parts = lua.create_table()?;
    for (name, f) in &call.part_list {
        parts.set(name.as_str(), table(lua, f)?)?;
    }
    let rc: LuaValue = match call.kind {
        CallKind::Submit => lua.globals().get::<mlua::Function>("slurm_job_submit")?.call((desc, parts, f64::from(call.uid)))?,
        CallKind::Modify => {
            let rec = table(lua, call.job_rec.as_ref().unwrap_or(&Fields::new()))?;
            lua.globals().get::<mlua::Function>("slurm_job_modify")?.call((desc, rec, parts, f64::from(call.uid)))?
        }
    };
    // Slurm: a non-numeric return is success.
    let rc = match rc {
        LuaValue::Number(n) => n as i64,
        LuaValue::Integer(n) => n,
        _ => 0,
    };
    let mut a = Answer { rc, ..Answer::default() };
    for pair in changed.pairs::<String, bool>() {
        let (k, _) = pair?;
        if let Some(v) = from_lua(&fields.get::<LuaValue>(k.as_str())?) {
            a.set.insert(k, v);
        }
    }
    if let Some(env) = env {
        for pair in env_changed.pairs::<String, bool>() {
            let (k, _) = pair?;
            let v: Option<mlua::LuaString> = env.get(k.as_str())?;
            a.env_set.insert(k, v.map(|s| s.to_string_lossy()));
        }
    }
    Ok(a)
}
