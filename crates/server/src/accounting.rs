//! The accounting API (`sacctmgr`, `scontrol show assoc_mgr`): the associations, accounts,
//! users and QOS as the controller enforces them, and `sacctmgr`'s changes, which the
//! controller checks against the caller's administrator level and keeps in the database.

use axum::extract::rejection::JsonRejection;
use axum::extract::{ConnectInfo, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use control::Controller;
use wire::{AccountingInfo, AcctRequest, AcctResponse, AssocRow};

use crate::app::{App, Peer, json_body, refused, user_name, user_of};

/// What `sacctmgr show` reads: every account's row, every listed user's associations resolved,
/// and the caller's own when the caller has only the account of their own name.
pub(crate) fn info(ctl: &Controller, uid: u32, me: &str) -> AccountingInfo {
    let c = &ctl.settings().cluster;
    let mut assocs: Vec<AssocRow> = c
        .accounts
        .iter()
        .map(|a| AssocRow {
            account: a.name.clone(),
            user: String::new(),
            parent: a.parent.clone().unwrap_or_else(|| "root".into()),
            shares: a.shares,
            qos: c.account_qos(&a.name),
            default_qos: c.account_default_qos(&a.name).unwrap_or_default(),
            limits: a.limits.clone(),
        })
        .collect();
    let row = |a: model::Association| AssocRow {
        account: a.account,
        user: a.user,
        parent: String::new(),
        shares: a.shares,
        qos: a.qos,
        default_qos: a.default_qos.unwrap_or_default(),
        limits: a.limits,
    };
    let mut users = c.users.clone();
    for a in &c.assocs {
        if let Some(r) = c.association(&a.user, &a.account) {
            assocs.push(row(r));
        }
    }
    // Listed users without rows of their own (a [[user]] with only a default account).
    for u in &c.users {
        if !c.assocs.iter().any(|a| a.user == u.name)
            && let Some(r) = c.association(&u.name, &u.default_account)
        {
            assocs.push(row(r));
        }
    }
    if !c.listed(me)
        && let Some(r) = c.association(me, me)
    {
        assocs.push(row(r));
        users.push(model::User {
            name: me.to_string(),
            default_account: me.to_string(),
            admin_level: ctl.admin_level(uid, me),
            coordinator: Vec::new(),
        });
    }
    for u in &mut users {
        u.admin_level = u.admin_level.max(if u.name == me { ctl.admin_level(uid, me) } else { model::AdminLevel::None });
    }
    AccountingInfo {
        cluster: ctl.settings().cluster_name.clone(),
        enforce: c.enforce.words(),
        qos: c.qos.clone(),
        accounts: c.accounts.clone(),
        users,
        assocs,
    }
}

async fn show(State(app): State<App>, ConnectInfo(peer): ConnectInfo<Peer>, headers: HeaderMap) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let me = user_name(uid);
    let g = app.lock();
    Json(info(&g.ctl, uid, &me)).into_response()
}

async fn change(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    body: Result<Json<AcctRequest>, JsonRejection>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let req = or_reply!(json_body(body));
    let me = user_name(uid);
    let r = app
        .with(|c| {
            let out = c.change_accounting(uid, &me, &req.change, req.dry_run);
            if out.is_ok() && !req.dry_run {
                refresh_admins(c);
            }
            out
        })
        .await;
    match r {
        Ok(Ok(text)) => {
            // New limits or rights may let waiting jobs start (or keep them waiting).
            app.wake.notify_one();
            Json(AcctResponse { text }).into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

/// Looks up the uids of the users the accounting makes operators or administrators, so the
/// controller knows them by uid (who may hold or cancel others' jobs, see everything).
pub(crate) fn refresh_admins(ctl: &mut Controller) {
    let uids = ctl.admin_names().iter().filter_map(|n| nix::unistd::User::from_name(n).ok().flatten().map(|u| u.uid.as_raw())).collect();
    ctl.set_admin_uids(uids);
}

pub(crate) fn routes(r: Router<App>) -> Router<App> {
    r.route("/v1/accounting", get(show).post(change))
}
