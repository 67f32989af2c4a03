//! The audit log over HTTP: every route that changes something is registered through
//! [`Routes::change`] with its fixed action name, and answered through [`record`], which
//! refuses a read-only token (403 `read_only`) and writes one audit row per request with
//! its result (`ok`, or the answer's fixed error code) right after the handler. A preview
//! (an action by filter without `confirm`) changes nothing and writes none. `GET /audit`
//! reads the log: operators' tokens (read-only ones too) all of it, a tenant's token the
//! rows of its own tenant's tokens.

use super::error::{ApiError, ErrorCode};
use super::params::ApiQuery;
use super::run_filter::parse_time;
use super::state::Shared;
use crate::rules::audit::{self, Action};
use crate::rules::tenant::Principal;
use crate::service::views;
use crate::store::{AuditFilter, NewAudit};
use axum::Json;
use axum::Router;
use axum::extract::{Extension, RawPathParams, Request, State};
use axum::handler::Handler;
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, on};
use serde::Deserialize;
use std::sync::Arc;

/// Who a request's token is, beyond its [`Principal`]: what its audit rows name.
#[derive(Debug, Clone)]
pub(super) struct Caller {
    pub(super) token_id: String,
    pub(super) label: String,
    pub(super) read_only: bool,
}

/// What a handler adds to its request's audit row: the run it started, an object only its
/// body named, or that it changed nothing (a preview).
#[derive(Debug, Clone, Default)]
pub(super) struct AuditNote {
    pub(super) run_id: Option<String>,
    pub(super) object: Option<String>,
    pub(super) preview: bool,
}

/// A route of the API as registered: its method, path and, for a change, its action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiRoute {
    pub method: &'static str,
    pub path: &'static str,
    pub action: Option<&'static str>,
}

/// The API's router as it is built, with the table of its routes. Without `shared` only
/// the table is wanted (`super::api_routes`), and no route is wrapped.
pub(super) struct Routes {
    pub(super) router: Router<Arc<Shared>>,
    pub(super) table: Vec<ApiRoute>,
    shared: Option<Arc<Shared>>,
}

/// What [`record`] needs of its route.
#[derive(Clone)]
struct Audited {
    shared: Arc<Shared>,
    action: Action,
    /// What the path's parameters name (`run`, `job`), if they do not say it themselves.
    kind: &'static str,
}

impl Routes {
    pub(super) fn new(shared: Option<Arc<Shared>>) -> Routes {
        Routes {
            router: Router::new(),
            table: Vec::new(),
            shared,
        }
    }

    /// A route that only reads: `GET`.
    pub(super) fn read<H, T>(mut self, path: &'static str, handler: H) -> Routes
    where
        H: Handler<T, Arc<Shared>>,
        T: 'static,
    {
        self.router = self.router.route(path, on(MethodFilter::GET, handler));
        self.table.push(ApiRoute {
            method: "GET",
            path,
            action: None,
        });
        self
    }

    /// A route that changes something: refused to read-only tokens, and audited.
    pub(super) fn change<H, T>(
        mut self,
        method: Method,
        path: &'static str,
        action: Action,
        kind: &'static str,
        handler: H,
    ) -> Routes
    where
        H: Handler<T, Arc<Shared>>,
        T: 'static,
    {
        let filter = MethodFilter::try_from(method.clone()).expect("a method a route takes");
        let mut route: MethodRouter<Arc<Shared>> = on(filter, handler);
        if let Some(shared) = &self.shared {
            let audited = Audited {
                shared: shared.clone(),
                action,
                kind,
            };
            route = route.layer(axum::middleware::from_fn_with_state(audited, record));
        }
        self.router = self.router.route(path, route);
        self.table.push(ApiRoute {
            method: method_name(&method),
            path,
            action: Some(action.as_str()),
        });
        self
    }
}

fn method_name(method: &Method) -> &'static str {
    match *method {
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        _ => "GET",
    }
}

/// Refuses a read-only token; otherwise runs the change and writes its audit row.
async fn record(
    State(audited): State<Audited>,
    params: Result<RawPathParams, axum::extract::rejection::RawPathParamsRejection>,
    request: Request,
    next: Next,
) -> Response {
    let caller = request.extensions().get::<Caller>().cloned();
    let tenant = request
        .extensions()
        .get::<Principal>()
        .and_then(|p| p.tenant().map(str::to_string));
    let values: Vec<String> = params
        .map(|p| p.iter().map(|(_, v)| v.to_string()).collect())
        .unwrap_or_default();
    let named = values.join(" ");
    let object = match (audited.kind, named.is_empty()) {
        ("", _) => named.clone(),
        (kind, true) => kind.to_string(),
        (kind, false) => format!("{kind} {named}"),
    };
    // Only what could be a run's id is kept as one: the path is the caller's text.
    let run_id = (audited.kind == "run" && super::params::is_run_id(&named)).then_some(named);
    let Some(caller) = caller else {
        return next.run(request).await;
    };
    let mut row = NewAudit {
        actor: "token",
        token_id: Some(caller.token_id.clone()),
        label: caller.label.clone(),
        tenant,
        action: audited.action.as_str(),
        object: audit::object(&object),
        run_id,
        result: audit::READ_ONLY.to_string(),
    };
    if caller.read_only {
        write(&audited.shared, &row).await;
        return ApiError::new(
            StatusCode::FORBIDDEN,
            audit::READ_ONLY,
            "this token is read-only: it sees what an operator sees and changes nothing",
        )
        .into_response();
    }
    let response = next.run(request).await;
    let note = response
        .extensions()
        .get::<AuditNote>()
        .cloned()
        .unwrap_or_default();
    if note.preview {
        return response;
    }
    row.result = if response.status().is_success() {
        audit::OK.to_string()
    } else {
        let code = response.extensions().get::<ErrorCode>();
        code.map_or("refused", |c| c.0).to_string()
    };
    if let Some(object) = note.object {
        row.object = audit::object(&object);
    }
    if note.run_id.is_some() {
        row.run_id = note.run_id;
    }
    write(&audited.shared, &row).await;
    response
}

/// Writes an audit row; a failure is logged, never the answer's: the change it records
/// was made (or refused) already.
async fn write(s: &Shared, row: &NewAudit) {
    if let Err(e) = s.app.store.insert_audit(row).await {
        tracing::warn!(code = "driver_failed", action = row.action, error = %e, "an audit row was not written");
    }
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct AuditQuery {
    /// RFC 3339 time, or a duration back from now (`1h`).
    since: Option<String>,
    /// A fixed action, e.g. `run.cancel`.
    action: Option<String>,
    /// Only the rows of this run.
    run: Option<String>,
    limit: Option<i64>,
}

/// `GET /audit`.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(super) struct AuditList {
    #[schema(value_type = Vec<views::AuditView>)]
    audit: Vec<serde_json::Value>,
}

/// `GET /audit`: newest first.
#[utoipa::path(get, path = "/audit", tag = "audit", params(AuditQuery),
    responses(
        (status = 200, description = "The audit log, newest first (a tenant's token: its own tokens' rows)", body = AuditList),
        (status = 400, description = "`invalid_parameter`", body = super::error::ErrorBody)))]
pub(super) async fn list(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<Json<AuditList>, ApiError> {
    let since = match q.since.as_deref() {
        Some(text) => Some(parse_time(text, s.app.store.now().await?, "since")?),
        None => None,
    };
    let action = q
        .action
        .map(|name| {
            Action::parse(&name)
                .map(|a| a.as_str().to_string())
                .ok_or_else(|| ApiError::invalid(Action::unknown(&name)))
        })
        .transpose()?;
    if q.run
        .as_deref()
        .is_some_and(|id| !super::params::is_run_id(id))
    {
        return Err(ApiError::invalid("run: a run's id"));
    }
    let filter = AuditFilter {
        since,
        action,
        tenant: who.tenant().map(str::to_string),
        run_id: q.run,
        limit: views::page_size(q.limit),
    };
    let rows = s.app.store.list_audit(&filter).await?;
    Ok(Json(AuditList {
        audit: rows.iter().map(views::audit).collect(),
    }))
}
