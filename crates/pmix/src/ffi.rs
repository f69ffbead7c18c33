//! The few parts of OpenPMIx's server API used here, declared by hand from `pmix_common.h` and
//! `pmix_server.h` of OpenPMIx 4.2 (Debian 12's `libpmix-dev`), and the library loaded at run
//! time (`libloading`), so that nothing builds or links against it.
//!
//! Only the 4.x ABI is declared: `pmix_proc_t` (a 256-byte namespace and a `u32` rank),
//! `pmix_data_array_t`, the server module (28 function pointers in the header's order, of
//! which four are set), and the info-list functions (`PMIx_Info_list_*`, since 4.1), which
//! build `pmix_info_t` arrays inside the library so that their layout never matters here.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_int, c_void};

/// `pmix_status_t`.
pub type Status = c_int;
/// `PMIX_SUCCESS`.
pub const SUCCESS: Status = 0;
/// `PMIX_ERROR`.
pub const ERROR: Status = -1;
/// `PMIX_ERR_INVALID_CRED`.
pub const ERR_INVALID_CRED: Status = -12;
/// `PMIX_ERR_NOT_SUPPORTED`.
pub const ERR_NOT_SUPPORTED: Status = -47;
/// `PMIX_OPERATION_SUCCEEDED`: done at once, no callback.
pub const OPERATION_SUCCEEDED: Status = -157;
/// `PMIX_RANK_WILDCARD`.
pub const RANK_WILDCARD: u32 = u32::MAX - 1;

/// `pmix_data_type_t` values.
pub const BOOL: u16 = 1;
/// A C string.
pub const STRING: u16 = 3;
/// `uint16_t`.
pub const UINT16: u16 = 13;
/// `uint32_t`.
pub const UINT32: u16 = 14;
/// A `pmix_data_array_t`.
pub const DATA_ARRAY: u16 = 39;
/// `pmix_rank_t`.
pub const PROC_RANK: u16 = 40;
/// A regular expression made by `PMIx_generate_regex`/`_ppn` (given as its string).
pub const REGEX: u16 = 49;

/// `pmix_proc_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Proc {
    /// `pmix_nspace_t`: `char[PMIX_MAX_NSLEN + 1]`.
    pub nspace: [c_char; 256],
    /// `pmix_rank_t`.
    pub rank: u32,
}

impl Proc {
    /// The process `rank` of `nspace` (cut to 255 bytes).
    pub fn new(nspace: &str, rank: u32) -> Proc {
        let mut p = Proc { nspace: [0; 256], rank };
        for (d, s) in p.nspace.iter_mut().zip(nspace.bytes().take(255)) {
            *d = s as c_char;
        }
        p
    }
}

/// `pmix_data_array_t`.
#[repr(C)]
pub struct DataArray {
    /// Element type.
    pub kind: u16,
    /// Number of elements.
    pub size: usize,
    /// The elements.
    pub array: *mut c_void,
}

/// `pmix_op_cbfunc_t`.
pub type OpCb = Option<unsafe extern "C" fn(Status, *mut c_void)>;
/// `pmix_release_cbfunc_t`.
pub type ReleaseCb = Option<unsafe extern "C" fn(*mut c_void)>;
/// `pmix_modex_cbfunc_t`.
pub type ModexCb = Option<unsafe extern "C" fn(Status, *const c_char, usize, *mut c_void, ReleaseCb, *mut c_void)>;
/// `pmix_server_client_connected_fn_t` and `pmix_server_client_finalized_fn_t`.
pub type ClientFn = Option<extern "C" fn(*const Proc, *mut c_void, OpCb, *mut c_void) -> Status>;
/// `pmix_server_abort_fn_t`.
pub type AbortFn = Option<extern "C" fn(*const Proc, *mut c_void, c_int, *const c_char, *mut Proc, usize, OpCb, *mut c_void) -> Status>;
/// `pmix_server_fencenb_fn_t` (`info` left opaque).
pub type FenceFn = Option<extern "C" fn(*const Proc, usize, *const c_void, usize, *mut c_char, usize, ModexCb, *mut c_void) -> Status>;
/// `pmix_server_dmodex_req_fn_t`.
pub type DmodexFn = Option<extern "C" fn(*const Proc, *const c_void, usize, ModexCb, *mut c_void) -> Status>;

/// `pmix_tool_connection_cbfunc_t`.
pub type ToolCb = Option<unsafe extern "C" fn(Status, *mut Proc, *mut c_void)>;
/// `pmix_server_tool_connection_fn_t` (`info` left opaque).
pub type ToolFn = Option<extern "C" fn(*mut c_void, usize, ToolCb, *mut c_void)>;

/// `pmix_server_module_t` (4.x): the v1 functions this host provides, 11 it leaves NULL
/// (publish, lookup, unpublish, spawn, connect, disconnect, register/deregister events,
/// listener; notify_event, query), `tool_connected` (which it must set: left NULL, the library
/// accepts any tool that names itself, without asking the host), and 11 more NULL (log,
/// allocate, job_control, monitor; get/validate credential, iof_pull, push_stdin; group,
/// fabric, client_connected2).
#[repr(C)]
pub struct Module {
    /// A client connected (after the handshake, before its messages are read; an error
    /// refuses it and closes the connection).
    pub client_connected: ClientFn,
    /// A client called `PMIx_Finalize`.
    pub client_finalized: ClientFn,
    /// A client called `PMIx_Abort`.
    pub abort: AbortFn,
    /// The local participants of a fence have all entered it.
    pub fence_nb: FenceFn,
    /// Another server's data is asked for.
    pub direct_modex: DmodexFn,
    /// Unset entries.
    pub unset_a: [*const c_void; 11],
    /// A tool (or launcher) asks to connect.
    pub tool_connected: ToolFn,
    /// Unset entries.
    pub unset_b: [*const c_void; 11],
}

type InitFn = unsafe extern "C" fn(*mut Module, *mut c_void, usize) -> Status;
type RegNspaceFn = unsafe extern "C" fn(*const c_char, c_int, *mut c_void, usize, OpCb, *mut c_void) -> Status;
type RegClientFn = unsafe extern "C" fn(*const Proc, u32, u32, *mut c_void, OpCb, *mut c_void) -> Status;
type SetupForkFn = unsafe extern "C" fn(*const Proc, *mut *mut *mut c_char) -> Status;
type ListStartFn = unsafe extern "C" fn() -> *mut c_void;
type ListAddFn = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_void, u16) -> Status;
type ListConvertFn = unsafe extern "C" fn(*mut c_void, *mut DataArray) -> Status;
type ListReleaseFn = unsafe extern "C" fn(*mut c_void);
type RegexFn = unsafe extern "C" fn(*const c_char, *mut *mut c_char) -> Status;
type ErrorStringFn = unsafe extern "C" fn(Status) -> *const c_char;

/// The loaded library.
pub struct Lib {
    _lib: libloading::Library,
    init: InitFn,
    register_nspace: RegNspaceFn,
    register_client: RegClientFn,
    setup_fork: SetupForkFn,
    list_start: ListStartFn,
    list_add: ListAddFn,
    list_convert: ListConvertFn,
    list_release: ListReleaseFn,
    generate_regex: RegexFn,
    generate_ppn: RegexFn,
    error_string: ErrorStringFn,
}

/// A value for an info list.
pub enum Value<'a> {
    /// `PMIX_BOOL`.
    Bool(bool),
    /// `PMIX_STRING`.
    Str(&'a str),
    /// `PMIX_UINT16`.
    U16(u16),
    /// `PMIX_UINT32`.
    U32(u32),
    /// `PMIX_PROC_RANK`.
    Rank(u32),
    /// `PMIX_REGEX`, as `PMIx_generate_*` made it.
    Regex(&'a Regex),
    /// `PMIX_DATA_ARRAY` of `PMIX_INFO`: a nested list.
    Infos(&'a Infos<'a>),
}

/// An info array built by the library (`PMIx_Info_list_*`).
pub struct Infos<'l> {
    lib: &'l Lib,
    list: *mut c_void,
    array: DataArray,
}

impl<'l> Infos<'l> {
    /// A list of `(key, value)`.
    pub fn new(lib: &'l Lib, items: &[(&str, Value<'_>)]) -> Result<Infos<'l>, String> {
        // SAFETY: PMIx_Info_list_start takes nothing and returns a list or NULL.
        let list = unsafe { (lib.list_start)() };
        if list.is_null() {
            return Err("PMIx_Info_list_start failed".into());
        }
        let mut me = Infos { lib, list, array: DataArray { kind: 0, size: 0, array: std::ptr::null_mut() } };
        for (key, value) in items {
            let k = CString::new(*key).map_err(|_| format!("key {key:?}"))?;
            let text;
            let (b, h, w);
            let (ptr, kind): (*const c_void, u16) = match value {
                Value::Bool(v) => {
                    b = *v;
                    ((&raw const b).cast(), BOOL)
                }
                Value::Str(s) => {
                    text = CString::new(*s).map_err(|_| format!("value of {key}"))?;
                    (text.as_ptr().cast(), STRING)
                }
                Value::Regex(r) => (r.0.cast_const().cast(), REGEX),
                Value::U16(v) => {
                    h = *v;
                    ((&raw const h).cast(), UINT16)
                }
                Value::U32(v) | Value::Rank(v) => {
                    w = *v;
                    ((&raw const w).cast(), if matches!(value, Value::U32(_)) { UINT32 } else { PROC_RANK })
                }
                Value::Infos(inner) => ((&raw const inner.array).cast(), DATA_ARRAY),
            };
            // SAFETY: the list is live; the key and value live across the call, which copies
            // both (a string, regex or data array deeply) into the list.
            let rc = unsafe { (lib.list_add)(me.list, k.as_ptr(), ptr, kind) };
            if rc != SUCCESS {
                return Err(format!("adding {key}: {}", lib.error(rc)));
            }
        }
        // SAFETY: the list is live; `array` receives a newly allocated pmix_info_t array that
        // the library owns (released with the process).
        let rc = unsafe { (lib.list_convert)(me.list, &raw mut me.array) };
        if rc != SUCCESS {
            return Err(format!("PMIx_Info_list_convert: {}", lib.error(rc)));
        }
        Ok(me)
    }

    fn raw(&self) -> (*mut c_void, usize) {
        (self.array.array, self.array.size)
    }
}

impl Drop for Infos<'_> {
    fn drop(&mut self) {
        // SAFETY: the list came from PMIx_Info_list_start and is released once. The converted
        // array is left to the process's end: the library may still refer to it.
        unsafe { (self.lib.list_release)(self.list) }
    }
}

fn sym<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
    // SAFETY: each name is looked up with the type its declaration above gives it, as in
    // OpenPMIx 4's headers.
    unsafe { lib.get::<T>(name.as_bytes()).map(|s| *s).map_err(|e| format!("{name}: {e}")) }
}

impl Lib {
    /// Loads `path` (a file name, searched as the dynamic loader does, or a path).
    pub fn load(path: &str) -> Result<Lib, String> {
        // SAFETY: loading OpenPMIx runs its constructors, which only set up its own state.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
        Ok(Lib {
            init: sym(&lib, "PMIx_server_init")?,
            register_nspace: sym(&lib, "PMIx_server_register_nspace")?,
            register_client: sym(&lib, "PMIx_server_register_client")?,
            setup_fork: sym(&lib, "PMIx_server_setup_fork")?,
            list_start: sym(&lib, "PMIx_Info_list_start")?,
            list_add: sym(&lib, "PMIx_Info_list_add")?,
            list_convert: sym(&lib, "PMIx_Info_list_convert")?,
            list_release: sym(&lib, "PMIx_Info_list_release")?,
            generate_regex: sym(&lib, "PMIx_generate_regex")?,
            generate_ppn: sym(&lib, "PMIx_generate_ppn")?,
            error_string: sym(&lib, "PMIx_Error_string")?,
            _lib: lib,
        })
    }

    /// A status in words.
    pub fn error(&self, rc: Status) -> String {
        // SAFETY: PMIx_Error_string returns a static string for any status.
        let p = unsafe { (self.error_string)(rc) };
        if p.is_null() {
            return format!("status {rc}");
        }
        // SAFETY: non-NULL: a NUL-terminated static string.
        let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        format!("{s} ({rc})")
    }

    fn check(&self, what: &str, rc: Status) -> Result<(), String> {
        if rc == SUCCESS || rc == OPERATION_SUCCEEDED { Ok(()) } else { Err(format!("{what}: {}", self.error(rc))) }
    }

    /// `PMIx_server_init`. The module must live for the rest of the process.
    pub fn server_init(&self, module: &'static mut Module, info: &Infos<'_>) -> Result<(), String> {
        let (a, n) = info.raw();
        // SAFETY: the module is 'static; the info array is live and copied by the library.
        self.check("PMIx_server_init", unsafe { (self.init)(module, a, n) })
    }

    /// `PMIx_server_register_nspace`, blocking (no callback).
    pub fn register_nspace(&self, nspace: &str, local: i32, info: &Infos<'_>) -> Result<(), String> {
        let p = Proc::new(nspace, 0);
        let (a, n) = info.raw();
        // SAFETY: the namespace buffer and info array are live; a NULL callback makes the call
        // wait for completion.
        self.check("PMIx_server_register_nspace", unsafe {
            (self.register_nspace)(p.nspace.as_ptr(), local, a, n, None, std::ptr::null_mut())
        })
    }

    /// `PMIx_server_register_client`, blocking.
    pub fn register_client(&self, proc_: &Proc, uid: u32, gid: u32) -> Result<(), String> {
        // SAFETY: proc is live; no server object; NULL callback: blocking.
        self.check("PMIx_server_register_client", unsafe {
            (self.register_client)(proc_, uid, gid, std::ptr::null_mut(), None, std::ptr::null_mut())
        })
    }

    /// `PMIx_server_setup_fork`: the variables the client needs, as `(name, value)`.
    pub fn setup_fork(&self, proc_: &Proc) -> Result<Vec<(String, String)>, String> {
        let mut env: *mut *mut c_char = std::ptr::null_mut();
        // SAFETY: proc is live; `env` starts as an empty argv-style array that the library
        // grows with malloc.
        self.check("PMIx_server_setup_fork", unsafe { (self.setup_fork)(proc_, &raw mut env) })?;
        let mut out = Vec::new();
        if !env.is_null() {
            let mut i = 0;
            loop {
                // SAFETY: a NULL-terminated array of NUL-terminated strings (left allocated:
                // a few hundred bytes, once).
                let p = unsafe { *env.add(i) };
                if p.is_null() {
                    break;
                }
                // SAFETY: as above.
                let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
                if let Some((k, v)) = s.split_once('=') {
                    out.push((k.to_string(), v.to_string()));
                }
                i += 1;
            }
        }
        Ok(out)
    }

    fn regex(&self, f: RegexFn, what: &str, input: &str) -> Result<Regex, String> {
        let c = CString::new(input).map_err(|_| format!("{what}: a NUL"))?;
        let mut out: *mut c_char = std::ptr::null_mut();
        // SAFETY: input is live; `out` receives the library's regex (a string, or a compressed
        // blob whose length only the library knows), passed back to it as is, as Slurm does.
        self.check(what, unsafe { f(c.as_ptr(), &raw mut out) })?;
        if out.is_null() {
            return Err(format!("{what}: nothing"));
        }
        Ok(Regex(out))
    }

    /// `PMIx_generate_regex` of comma-separated host names.
    pub fn node_regex(&self, nodes: &str) -> Result<Regex, String> {
        self.regex(self.generate_regex, "PMIx_generate_regex", nodes)
    }

    /// `PMIx_generate_ppn` of `0,1;2,3` (ranks per node).
    pub fn ppn_regex(&self, map: &str) -> Result<Regex, String> {
        self.regex(self.generate_ppn, "PMIx_generate_ppn", map)
    }
}

/// A regular expression the library made (left allocated: once per task).
pub struct Regex(*mut c_char);

/// Fence data handed to the library until it calls [`release_boxed`].
pub type Boxed = Box<Vec<u8>>;

/// The release callback for fence data handed to the library: drops the box.
///
/// # Safety
/// `p` is a pointer made by `Box::into_raw` of a [`Boxed`], released once.
pub unsafe extern "C" fn release_boxed(p: *mut c_void) {
    if !p.is_null() {
        // SAFETY: per the contract above.
        drop(unsafe { Box::from_raw(p.cast::<Vec<u8>>()) });
    }
}

/// Calls a modex callback with `data`, which the library reads until it releases it.
pub fn modex_done(cb: ModexCb, cbdata: *mut c_void, status: Status, data: Vec<u8>) {
    let Some(f) = cb else { return };
    let boxed: Boxed = Box::new(data);
    let (ptr, len) = (boxed.as_ptr().cast::<c_char>(), boxed.len());
    let raw = Box::into_raw(boxed).cast::<c_void>();
    // SAFETY: the callback and its data came from the library for this operation; the bytes
    // stay alive until it calls release_boxed.
    unsafe { f(status, ptr, len, cbdata, Some(release_boxed), raw) }
}

/// Answers a tool's connection request with `status`.
pub fn tool_done(cb: ToolCb, cbdata: *mut c_void, status: Status) {
    let Some(f) = cb else { return };
    let mut nobody = Proc::new("", RANK_WILDCARD);
    // SAFETY: the callback and its data came from the library for this request; it copies the
    // proc before it returns.
    unsafe { f(status, &raw mut nobody, cbdata) }
}

/// Reads the participants of a fence.
pub fn procs<'a>(p: *const Proc, n: usize) -> &'a [Proc] {
    if p.is_null() || n == 0 {
        return &[];
    }
    // SAFETY: the library passes an array of `n` procs, live for the call.
    unsafe { std::slice::from_raw_parts(p, n) }
}

/// Reads the bytes of a fence's local data.
pub fn bytes<'a>(p: *const c_char, n: usize) -> &'a [u8] {
    if p.is_null() || n == 0 {
        return &[];
    }
    // SAFETY: the library passes `n` bytes, live for the call.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) }
}

/// Reads a C string the library passes (an abort's message).
pub fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: a NUL-terminated string, live for the call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A handler that does nothing, so that the signal interrupts no one but the task (a handler,
/// unlike SIG_IGN, is reset by exec: the task gets the default).
extern "C" fn ignore(_: c_int) {}

/// Catches (and drops) the signals a task's process group gets from `scancel`, `--signal` or a
/// replica's stop, so that the host outlives its task and reports how it ended.
pub fn catch_signals() {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    let act = SigAction::new(SigHandler::Handler(ignore), SaFlags::SA_RESTART, SigSet::empty());
    for s in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGALRM,
        Signal::SIGPIPE,
    ] {
        // SAFETY: the handler is async-signal-safe (it does nothing).
        let _ = unsafe { sigaction(s, &act) };
    }
}

/// Dies of `sig` as the task did (the default action restored, then raised).
pub fn die_of(sig: i32) {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    if let Ok(s) = Signal::try_from(sig) {
        // No core file of the host's over the task's.
        let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
        let act = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
        // SAFETY: restoring the default action.
        let _ = unsafe { sigaction(s, &act) };
        let mut set = SigSet::empty();
        set.add(s);
        let _ = set.thread_unblock();
        let _ = nix::sys::signal::raise(s);
    }
}
