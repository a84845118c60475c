//! The OpenAPI 3.1 descriptions of the two planes, served at `GET /openapi.json` on each
//! listener and checked in as `docs/openapi/{meta,admin}.json`.
//!
//! * **Schemas** come from the wire types (`ToSchema` derives in `kvcm_core::wire`); the
//!   conventions of DESIGN §2 (64-bit integers as strings, enums as names or numbers, `null` as
//!   the default) have their schemas in `kvcm_core::wire::codec`, next to the serde code.
//! * **Operations** come from the route lists: a plane registers each RPC with [`Rpcs::rpc`],
//!   which serves `POST /api/<name>` and describes it from the handler's own signature
//!   (`WireJson<Request>` in, `Reply<Response>` out), so a route and its description cannot
//!   drift apart. The plane's other endpoints (`/api/healthy`, `/metrics`, `/openapi.json`)
//!   and the HTTP errors the shared layers produce are described here, by [`Plane`].
//! * A reply is described as its message's fields plus `header`, all required, because
//!   [`crate::reply`] always writes every field (defaults on errors); the fields are checked
//!   against what serde writes for the message's default value.
//!
//! A description is built once, when the plane's router is built, and served as fixed bytes.
//! Building panics only on a programming error (two different schemas under one name, a reply
//! field serde writes but the schema lacks); the unit tests build both descriptions and compare
//! them with the checked-in files, so such an error never reaches a server.

use crate::auth::Caller;
use crate::reply::{Fields, Reply, WireBody, WireJson};
use crate::state::AppState;
use axum::Router;
use axum::extract::State;
use axum::handler::Handler;
use axum::http::header::CONTENT_TYPE;
use axum::response::Response as HttpResponse;
use axum::routing::{MethodRouter, get, post};
use bytes::Bytes;
use kvcm_core::wire::Header;
use std::collections::BTreeMap;
use std::future::Future;
use utoipa::ToSchema;
use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::info::{InfoBuilder, LicenseBuilder};
use utoipa::openapi::path::{HttpMethod, OperationBuilder, PathItem, PathsBuilder};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::response::{Response, ResponseBuilder, ResponsesBuilder};
use utoipa::openapi::schema::{ArrayItems, KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::tag::TagBuilder;
use utoipa::openapi::{Components, OpenApi, OpenApiBuilder, Ref, RefOr, Required};

/// Which listener a description is for: it decides the title, the authentication and the
/// endpoints besides the RPCs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plane {
    Meta,
    Admin,
}

impl Plane {
    fn title(self) -> &'static str {
        match self {
            Plane::Meta => "kvcm meta plane",
            Plane::Admin => "kvcm admin plane",
        }
    }

    /// The tag of the plane's RPCs: the Tair KVCM service they belong to.
    fn tag(self) -> &'static str {
        match self {
            Plane::Meta => "MetaService",
            Plane::Admin => "AdminService",
        }
    }

    /// The plane, its authentication, then the conventions both planes share.
    fn description(self) -> String {
        let intro = match self {
            Plane::Meta => META_INTRO,
            Plane::Admin => ADMIN_INTRO,
        };
        format!("{intro}\n\n{CONVENTIONS}")
    }
}

/// What a handler's signature says about its wire types: `Args` are its extractors.
pub trait Signature<Args> {
    type Request: ToSchema;
    type Response: ToSchema + Fields + Default;
}

impl<F, Fut, Req, Resp> Signature<(State<AppState>, WireJson<Req>)> for F
where
    F: FnOnce(State<AppState>, WireJson<Req>) -> Fut,
    Fut: Future<Output = Reply<Resp>>,
    Req: ToSchema,
    Resp: ToSchema + Fields + Default,
{
    type Request = Req;
    type Response = Resp;
}

impl<F, Fut, Req, Resp> Signature<(State<AppState>, Caller, WireJson<Req>)> for F
where
    F: FnOnce(State<AppState>, Caller, WireJson<Req>) -> Fut,
    Fut: Future<Output = Reply<Resp>>,
    Req: ToSchema,
    Resp: ToSchema + Fields + Default,
{
    type Request = Req;
    type Response = Resp;
}

impl<F, Fut, Req, Resp> Signature<(State<AppState>, Caller, WireBody<Req>)> for F
where
    F: FnOnce(State<AppState>, Caller, WireBody<Req>) -> Fut,
    Fut: Future<Output = Result<Reply<Resp>, HttpResponse>>,
    Req: ToSchema,
    Resp: ToSchema + Fields + Default,
{
    type Request = Req;
    type Response = Resp;
}

impl<F, Fut, Req, Resp> Signature<(WireJson<Req>,)> for F
where
    F: FnOnce(WireJson<Req>) -> Fut,
    Fut: Future<Output = Reply<Resp>>,
    Req: ToSchema,
    Resp: ToSchema + Fields + Default,
{
    type Request = Req;
    type Response = Resp;
}

/// One described RPC.
struct Rpc {
    name: &'static str,
    summary: &'static str,
    describe: fn(&mut Description, &Rpc),
}

/// A plane's RPC routes and their descriptions, built together one line per RPC.
pub struct Rpcs {
    plane: Plane,
    router: Router<AppState>,
    rpcs: Vec<Rpc>,
}

impl std::fmt::Debug for Rpcs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rpcs").field("plane", &self.plane).field("rpcs", &self.rpcs.len()).finish()
    }
}

impl Rpcs {
    pub fn new(plane: Plane) -> Rpcs {
        Rpcs { plane, router: Router::new(), rpcs: Vec::new() }
    }

    /// Serves `POST /api/<name>` with `handler` and describes it: request body and reply come
    /// from the handler's `WireJson<_>` and `Reply<_>` types, `summary` is one line for humans.
    pub fn rpc<H, T, A>(mut self, name: &'static str, handler: H, summary: &'static str) -> Rpcs
    where
        H: Handler<T, AppState> + Signature<A>,
        T: 'static,
    {
        self.router = self.router.route(&format!("/api/{name}"), post(handler));
        self.rpcs.push(Rpc { name, summary, describe: describe_rpc::<H::Request, H::Response> });
        self
    }

    /// The plane's OpenAPI description.
    pub fn openapi(&self) -> OpenApi {
        let mut d = Description::default();
        for rpc in &self.rpcs {
            (rpc.describe)(&mut d, rpc);
        }
        d.finish(self.plane)
    }

    /// The RPC routes (for the plane to add its guard and other routes to) and the
    /// `GET /openapi.json` route serving the description, rendered once here.
    pub fn into_routes(self) -> (Router<AppState>, MethodRouter<AppState>) {
        let body = Bytes::from(to_json(&self.openapi()));
        (self.router, get(move || std::future::ready(([(CONTENT_TYPE, "application/json")], body.clone()))))
    }
}

/// The text of a description as checked in: pretty-printed, keys in a fixed order (schemas by
/// name, properties in declaration order, paths in route order), ending with a newline.
pub fn to_json(doc: &OpenApi) -> String {
    let mut text = doc.to_pretty_json().expect("an OpenAPI document always serialises");
    text.push('\n');
    text
}

/// Collects the paths and the components while the RPCs describe themselves.
#[derive(Default)]
struct Description {
    paths: Vec<(String, PathItem)>,
    schemas: BTreeMap<String, RefOr<Schema>>,
}

fn describe_rpc<Req: ToSchema, Resp: ToSchema + Fields + Default>(d: &mut Description, rpc: &Rpc) {
    let request = d.schema::<Req>();
    let reply = d.reply::<Resp>();
    d.paths.push((format!("/api/{}", rpc.name), PathItem::new(HttpMethod::Post, operation(rpc, request, reply))));
}

/// The operation of an RPC; its security and error replies depend on the plane (set later).
fn operation(rpc: &Rpc, request: Ref, reply: Ref) -> OperationBuilder {
    OperationBuilder::new()
        .operation_id(Some(rpc.name))
        .summary(Some(rpc.summary))
        .request_body(Some(
            RequestBodyBuilder::new()
                .description(Some(
                    "Every field is optional (absent means its default) and unknown fields are ignored. \
                     The server reads the body as JSON whatever its Content-Type.",
                ))
                .required(Some(Required::True))
                .content("application/json", ContentBuilder::new().schema(Some(request)).build())
                .build(),
        ))
        .response(
            "200",
            ResponseBuilder::new()
                .description(
                    "The reply: `header` and every field of the message. Domain errors are HTTP 200 too, with a \
                     non-OK `header.status.code`, a message that says what to fix, and default values in the \
                     other fields.",
                )
                .content("application/json", ContentBuilder::new().schema(Some(reply)).build()),
        )
}

impl Description {
    /// Adds `name` → `schema`; the same name twice must mean the same schema.
    fn add(&mut self, name: String, schema: RefOr<Schema>) {
        if let Some(old) = self.schemas.get(&name) {
            assert!(*old == schema, "two different schemas are both named {name}: rename one with #[schema(as = …)]");
        } else {
            self.schemas.insert(name, schema);
        }
    }

    /// Adds `T` and every schema it refers to; returns a reference to `T`.
    fn schema<T: ToSchema>(&mut self) -> Ref {
        self.add(T::name().into_owned(), T::schema());
        let mut deps = Vec::new();
        T::schemas(&mut deps);
        for (name, schema) in deps {
            self.add(name, schema);
        }
        Ref::from_schema_name(T::name())
    }

    /// Adds the reply of message `T` under `T`'s name: `header` plus `T`'s fields, all
    /// required except those serde omits from a default `T` (`skip_serializing_if`).
    fn reply<T: ToSchema + Fields + Default>(&mut self) -> Ref {
        let header = self.schema::<Header>();
        let name = T::name().into_owned();
        let RefOr::T(Schema::Object(message)) = T::schema() else {
            panic!("reply message {name} must be a struct with named fields");
        };
        let written = match crate::reply::fields_value(&T::default()) {
            Ok(serde_json::Value::Object(fields)) => fields,
            other => panic!("reply message {name} must serialise to a JSON object, not {other:?}"),
        };
        for field in written.keys() {
            assert!(
                message.properties.contains_key(field),
                "reply {name}: serde writes `{field}`, its schema lacks it"
            );
        }
        let mut reply =
            ObjectBuilder::new().description(message.description.clone()).property("header", header).required("header");
        for (field, schema) in message.properties {
            reply = if written.contains_key(&field) {
                reply.property(field.clone(), schema).required(field)
            } else {
                reply.property(field, schema)
            };
        }
        let mut deps = Vec::new();
        T::schemas(&mut deps);
        for (dep, schema) in deps {
            self.add(dep, schema);
        }
        self.add(name.clone(), reply.into());
        Ref::from_schema_name(name)
    }

    fn finish(mut self, plane: Plane) -> OpenApi {
        self.add("Health".into(), health_schema());
        self.schemas.values_mut().for_each(tidy);
        let mut paths = PathsBuilder::new();
        for (path, item) in self.paths {
            paths = paths.path(path, for_plane(plane, item));
        }
        for (path, item) in plain_endpoints(plane) {
            paths = paths.path(path, item);
        }
        let mut components = Components::new();
        components.schemas = self.schemas;
        components.responses = error_responses();
        components.security_schemes = BTreeMap::from([
            (
                "basic".to_string(),
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Basic)
                        .description(Some(
                            "An account's name and password: `Authorization: Basic base64(user:password)`; or \
                             any user name with an API key as the password.",
                        ))
                        .build(),
                ),
            ),
            (
                "bearer".to_string(),
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .bearer_format("kvcm_<key id>_<secret> | user:password")
                        .description(Some(
                            "An API key (`Authorization: Bearer kvcm_…`, see createApiKey), or an account's name \
                             and password (`Authorization: Bearer user:password`).",
                        ))
                        .build(),
                ),
            ),
        ]);
        OpenApiBuilder::new()
            .info(
                InfoBuilder::new()
                    .title(plane.title())
                    .version(env!("CARGO_PKG_VERSION"))
                    .description(Some(plane.description()))
                    .license(Some(LicenseBuilder::new().name("Apache-2.0").identifier(Some("Apache-2.0")).build()))
                    .build(),
            )
            .tags(Some([
                TagBuilder::new()
                    .name(plane.tag())
                    .description(Some("The Tair KVCM RPCs, `POST /api/<rpcName>`."))
                    .build(),
                TagBuilder::new()
                    .name("Operations")
                    .description(Some("Health, metrics and this description; never need credentials."))
                    .build(),
            ]))
            .paths(paths.build())
            .components(Some(components))
            .build()
    }
}

const CONVENTIONS: &str = "\
Every RPC is `POST /api/<rpcName>` with a JSON body, as in Tair KVCache Manager's HTTP protocol; \
existing connectors work unchanged.

* Field names are snake_case. Every request field is optional (absent means its default) and \
unknown request fields are ignored.
* 64-bit integers (`Int64`, `UInt64`) are written as decimal strings in replies; requests may \
send a JSON number or a decimal string. Other integers are JSON numbers, written without fraction \
or exponent.
* Enums are written as their names; requests may also send their numbers.
* `null` reads as the default for lists, 64-bit integers, enums, messages marked nullable and \
`meta_indexer_config`; for strings, booleans, 32-bit integers and other messages it is an error \
(HTTP 400).
* Every reply carries `header: {status: {code, message}, request_id}` and every field of its \
message. Domain errors are HTTP 200 with a non-OK `code`, a message that says what to fix, and \
default values in the other fields.
* HTTP errors carry the same `header` and no other field: 400 (the body is not a JSON object of \
the request's shape), 401 (credentials missing or wrong), 403 (a credential acting beyond its role \
or instance-group scopes), 404 (unknown route), 405 (wrong method), 408 (the request outlived \
`request_timeout_ms`), 413 (body larger than `max_body_bytes`), 429 (too many failed logins; \
`Retry-After`), 503 (the metadata store is unavailable — Valkey unreachable or failing over — \
or password checks are busy; `Retry-After`). Request bounds (keys, specs, names, …) are domain errors: HTTP 200, \
`INVALID_ARGUMENT`, nothing changed.";

const META_INTRO: &str = "\
The **meta plane** of kvcm (engines; default port 6382): Tair KVCM's `MetaService`.

Authentication is off unless the server runs with `meta_auth = true`; then every RPC needs a \
credential — an API key (`Bearer kvcm_…`) or an account (HTTP Basic or `Bearer user:password`) — \
and a ROLE_USER credential may act only on instances of the instance groups it is scoped to \
(HTTP 403 otherwise). `GET /api/healthy` and `GET /openapi.json` never need credentials.";

const ADMIN_INTRO: &str = "\
The **admin plane** of kvcm (operators; default port 6492): Tair KVCM's `AdminService`.

Once an admin account exists, every RPC needs an admin credential (an ROLE_ADMIN API key or \
account; a ROLE_USER one gets 403), and the last admin can never be deleted. Without any admin \
the plane is open only on loopback (or with `allow_anonymous_admin`), so that the first admin can \
be added. `GET /api/healthy`, `GET /metrics` and `GET /openapi.json` never need credentials.";

/// Adds the plane's tag, authentication and HTTP error replies to an RPC.
fn for_plane(plane: Plane, item: PathItem) -> PathItem {
    let mut item = item;
    let Some(op) = item.post.as_mut() else { return item };
    op.tags = Some(vec![plane.tag().to_string()]);
    let basic = SecurityRequirement::new("basic", Vec::<String>::new());
    let bearer = SecurityRequirement::new("bearer", Vec::<String>::new());
    op.security = Some(match plane {
        // Optional: `{}` means "no credentials" is accepted too (meta_auth off).
        Plane::Meta => vec![basic, bearer, SecurityRequirement::default()],
        Plane::Admin => vec![basic, bearer],
    });
    let errors = ["400", "401", "403", "405", "408", "413", "429", "503"];
    for code in errors {
        op.responses.responses.insert(code.to_string(), Ref::from_response_name(error_name(code)).into());
    }
    item
}

fn error_name(code: &str) -> &'static str {
    match code {
        "400" => "BadRequest",
        "401" => "Unauthorized",
        "403" => "Forbidden",
        "404" => "NotFound",
        "405" => "MethodNotAllowed",
        "408" => "RequestTimeout",
        "413" => "PayloadTooLarge",
        "429" => "TooManyRequests",
        "503" => "ServiceUnavailable",
        _ => unreachable!("no error reply {code}"),
    }
}

/// The HTTP error replies of the shared layers ([`crate::with_common_layers`],
/// [`crate::reply::WireJson`], [`crate::auth`]).
fn error_responses() -> BTreeMap<String, RefOr<Response>> {
    let header_only = || ContentBuilder::new().schema(Some(Ref::from_schema_name("CommonResponse"))).build();
    let with_header = |description: &str| {
        ResponseBuilder::new().description(description).content("application/json", header_only()).build()
    };
    let retry_after = |description: &str| -> RefOr<Response> {
        ResponseBuilder::new()
            .description(description)
            .header(
                "Retry-After",
                HeaderBuilder::new()
                    .schema(ObjectBuilder::new().schema_type(Type::Integer))
                    .description(Some("Seconds to wait"))
                    .build(),
            )
            .content("application/json", header_only())
            .build()
            .into()
    };
    let unauthorized = ResponseBuilder::new()
        .description(
            "Credentials are required and missing, malformed or wrong. `header.status.code` is \
             `INVALID_ARGUMENT`.",
        )
        .header(
            "WWW-Authenticate",
            HeaderBuilder::new()
                .schema(ObjectBuilder::new().schema_type(Type::String))
                .description(Some("`Basic realm=\"kvcm\"`"))
                .build(),
        )
        .content("application/json", header_only())
        .build();
    BTreeMap::from([
        (
            "BadRequest".into(),
            with_header(
                "The body is not JSON, or a field has the wrong JSON type or is out of range. \
                 `header.status.code` is `INVALID_ARGUMENT`; the message names the field.",
            )
            .into(),
        ),
        ("Unauthorized".into(), unauthorized.into()),
        (
            "Forbidden".into(),
            with_header(
                "The credential may not do this: a ROLE_USER credential on the admin plane, or one acting on an \
                 instance outside its instance-group scopes. `header.status.code` is `INVALID_ARGUMENT`; nothing \
                 changed.",
            )
            .into(),
        ),
        ("MethodNotAllowed".into(), with_header("RPCs are `POST`. `header.status.code` is `UNSUPPORTED`.").into()),
        (
            "TooManyRequests".into(),
            retry_after(
                "Too many failed logins for this user or from this address; retry after `Retry-After` seconds. \
             `header.status.code` is `INVALID_ARGUMENT`.",
            ),
        ),
        (
            "ServiceUnavailable".into(),
            retry_after(
                "The metadata store is unavailable (Valkey unreachable, or failing over: `CLUSTERDOWN`, \
             `TRYAGAIN`, `LOADING`, `MOVED` storms, …), or password checks are busy; retry after \
             `Retry-After` seconds. `header.status.code` is `SERVICE_NOT_READY`.",
            ),
        ),
        (
            "NotFound".into(),
            with_header("No such route (any path not in this description). `header.status.code` is `UNSUPPORTED`.")
                .into(),
        ),
        (
            "RequestTimeout".into(),
            with_header(
                "The request outlived the server's `request_timeout_ms`. `header.status.code` is \
                 `SERVICE_NOT_READY`; retry.",
            )
            .into(),
        ),
        (
            "PayloadTooLarge".into(),
            with_header(
                "The body is larger than the server's `max_body_bytes`; send fewer keys per request. \
                 `header.status.code` is `INVALID_ARGUMENT`.",
            )
            .into(),
        ),
    ])
}

/// `GET /api/healthy` (both planes), `GET /metrics` (admin) and `GET /openapi.json`.
fn plain_endpoints(plane: Plane) -> Vec<(&'static str, PathItem)> {
    let health = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content("application/json", ContentBuilder::new().schema(Some(Ref::from_schema_name("Health"))).build())
    };
    let endpoint = |id: &str, summary: &str, responses: ResponsesBuilder| {
        PathItem::new(
            HttpMethod::Get,
            OperationBuilder::new()
                .operation_id(Some(id))
                .summary(Some(summary))
                .tag("Operations")
                .responses(responses.response("408", Ref::from_response_name("RequestTimeout"))),
        )
    };
    let mut endpoints = vec![(
        "/api/healthy",
        endpoint(
            "healthy",
            "Load-balancer health check: every Valkey node answers",
            ResponsesBuilder::new()
                .response("200", health("Every Valkey node answers: `{\"status\": \"OK\"}`."))
                .response("503", health("A Valkey node does not answer: `status` is `UNHEALTHY`, `reason` says why.")),
        ),
    )];
    if plane == Plane::Admin {
        endpoints.push((
            "/metrics",
            endpoint(
                "metrics",
                "Prometheus metrics of this frontend",
                ResponsesBuilder::new().response(
                    "200",
                    ResponseBuilder::new().description("Prometheus text exposition format 0.0.4.").content(
                        "text/plain",
                        ContentBuilder::new().schema(Some(ObjectBuilder::new().schema_type(Type::String))).build(),
                    ),
                ),
            ),
        ));
    }
    endpoints.push((
        "/openapi.json",
        endpoint(
            "openapi",
            "This description",
            ResponsesBuilder::new().response(
                "200",
                ResponseBuilder::new().description("The OpenAPI 3.1 description of this listener.").content(
                    "application/json",
                    ContentBuilder::new().schema(Some(ObjectBuilder::new().schema_type(Type::Object))).build(),
                ),
            ),
        ),
    ));
    endpoints
}

/// What `GET /api/healthy` answers (built by hand in [`crate::healthy`]).
fn health_schema() -> RefOr<Schema> {
    ObjectBuilder::new()
        .description(Some("Health of this frontend's connection to Valkey."))
        .property("status", ObjectBuilder::new().schema_type(Type::String).enum_values(Some(["OK", "UNHEALTHY"])))
        .required("status")
        .property(
            "reason",
            ObjectBuilder::new().schema_type(Type::String).description(Some("Why, when `status` is `UNHEALTHY`.")),
        )
        .into()
}

/// Two touches the derives cannot make, applied to every schema:
/// * every `int32` gets its range: serde rejects anything outside it (HTTP 400), and a fuzzer
///   that only sees `format: int32` would not know;
/// * a message-typed field loses the default the derive gives it (the whole default message):
///   it says nothing the conventions do not, and client generators reject defaults on models.
fn tidy(schema: &mut RefOr<Schema>) {
    if let RefOr::T(Schema::OneOf(one)) = schema
        && one.items.len() == 1
        && matches!(one.items[0], RefOr::Ref(_))
        && matches!(one.default, Some(serde_json::Value::Object(_)))
    {
        one.default = None;
        if one.description.is_none() && one.title.is_none() {
            *schema = one.items.remove(0);
        }
    }
    let RefOr::T(schema) = schema else { return };
    match schema {
        Schema::Object(o) => {
            if o.format == Some(SchemaFormat::KnownFormat(KnownFormat::Int32)) {
                o.minimum.get_or_insert((i32::MIN as isize).into());
                o.maximum.get_or_insert((i32::MAX as isize).into());
            }
            o.properties.values_mut().for_each(tidy);
        }
        Schema::Array(a) => {
            if let ArrayItems::RefOrSchema(items) = &mut a.items {
                tidy(items);
            }
        }
        Schema::OneOf(s) => s.items.iter_mut().for_each(tidy),
        Schema::AllOf(s) => s.items.iter_mut().for_each(tidy),
        Schema::AnyOf(s) => s.items.iter_mut().for_each(tidy),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// Compares a plane's description with its checked-in file, or rewrites the file when
    /// `KVCM_UPDATE_OPENAPI=1` (what `make openapi` does).
    fn check_checked_in(file: &str, doc: &OpenApi) {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi").join(file);
        let generated = to_json(doc);
        if std::env::var("KVCM_UPDATE_OPENAPI").is_ok_and(|v| v == "1") {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &generated).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
            return;
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == generated,
            "docs/openapi/{file} differs from the description the code generates (first difference at line {}): \
             run `make openapi` and commit the result",
            checked_in.lines().zip(generated.lines()).take_while(|(a, b)| a == b).count() + 1
        );
    }

    #[test]
    fn checked_in_meta_description_matches_the_code() {
        check_checked_in("meta.json", &crate::meta::rpcs().openapi());
    }

    #[test]
    fn checked_in_admin_description_matches_the_code() {
        check_checked_in("admin.json", &crate::admin::rpcs().openapi());
    }
}
