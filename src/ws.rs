//! votegraph's own GraphQL-over-WebSocket server, for `graphql-transport-ws`
//! and the legacy `graphql-ws`. async-graphql's loop waits forever for
//! `connection_init`, makes a bad token anonymous, lets a duplicate id
//! replace a running subscription and has no limits; this one keeps the
//! protocol's close codes and the limits of docs/api.md ("WebSocket limits
//! and close codes"), and says goodbye (1001) on shutdown. Queries and
//! mutations run through the request pipeline, as over HTTP.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::sync::Arc;
use std::time::Duration;

use async_graphql::http::{WebSocketProtocols as Protocol, ALL_WEBSOCKET_PROTOCOLS};
use async_graphql::parser::types::OperationType;
use async_graphql::{Data, Executor, Response};
use async_graphql_poem::GraphQLProtocol;
use futures_util::stream::{self, AbortHandle, BoxStream, SelectAll, SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use poem::web::websocket::{Message, WebSocket, WebSocketConfig, WebSocketStream};
use poem::{FromRequest, IntoResponse};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::watch;
use tracing::Instrument;

use crate::auth::{token_hash, Session};
use crate::client_addr::ClientAddr;
use crate::error::{AppError, AppResult};
use crate::graphql::shared_subscriptions::SharedStreams;
use crate::graphql::{Api, RequestContext};
use crate::pipeline::{self, PipelineRequest, ResponseContent};
use crate::pubsub::PubSub;
use crate::server::{ClientSlot, PerClient};
use crate::sessions::{SessionWatch, Watched};
use crate::store::Store;

/// How long a closing connection waits for the client's half of the close
/// handshake, so the close frame is read before the TCP connection goes.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Ids are echoed in close reasons and errors; a long one is cut so a
/// reason stays within a close frame's 123 bytes and echoes little.
const MAX_ECHOED_ID: usize = 32;

/// Seconds a client at its WebSocket limit is told to wait: a slot frees
/// only when one of its sockets closes.
const CONNECTION_RETRY_AFTER_SECS: u64 = 5;

/// What one connection, and one address, may hold (the `--ws-*` flags).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub keep_alive: Duration,
    pub init_timeout: Duration,
    /// How long one write may take before the client counts as gone.
    pub send_timeout: Duration,
    pub max_message_bytes: usize,
    pub max_subscriptions: usize,
    pub max_connections_per_client: usize,
    /// Distinct shared subscription streams in the process (0: none).
    pub max_shared_streams: usize,
}

/// Process-wide WebSocket state, the upgrade handler's poem data.
#[derive(Clone)]
pub struct WebSockets {
    limits: Limits,
    pub(crate) connections: PerClient,
    pub(crate) shared: SharedStreams,
    shutdown: Shutdown,
    /// Ends the connections whose login ended.
    pub(crate) sessions: SessionWatch,
}

impl WebSockets {
    /// `pubsub` counts the subscribers of shared streams.
    pub fn new(limits: Limits, shutdown: Shutdown, pubsub: PubSub, sessions: SessionWatch) -> Self {
        Self {
            limits,
            connections: PerClient::default(),
            shared: SharedStreams::new(limits.max_shared_streams, pubsub),
            shutdown,
            sessions,
        }
    }

    /// Upgrades `GET /graphql` to a GraphQL WebSocket for `client`; a
    /// `BAD_REQUEST` that says what is missing, or `TOO_MANY_CONNECTIONS`.
    pub async fn upgrade(
        &self,
        schema: &Api,
        req: &poem::Request,
        body: &mut poem::RequestBody,
        client: ClientAddr,
        header_auth: Option<String>,
    ) -> AppResult<poem::Response> {
        // Checked before the upgrade, so a client that forgot the subprotocol
        // reads why instead of an empty 400.
        let Ok(protocol) = GraphQLProtocol::from_request(req, body).await else {
            return Err(AppError::BadRequest(
                "a GraphQL WebSocket needs the subprotocol graphql-transport-ws (or the legacy graphql-ws) in Sec-WebSocket-Protocol".to_owned(),
            ));
        };
        let Ok(websocket) = WebSocket::from_request(req, body).await else {
            return Err(AppError::BadRequest(
                "not a valid WebSocket upgrade: Sec-WebSocket-Key and Sec-WebSocket-Version: 13 are required".to_owned(),
            ));
        };
        let max = self.limits.max_connections_per_client;
        let Some(slot) = self.connections.admit(client.ip(), max) else {
            return Err(AppError::TooManyConnections {
                websocket: true,
                retry_after_secs: CONNECTION_RETRY_AFTER_SECS,
            });
        };
        let connection = Connection {
            schema: schema.clone(),
            protocol: protocol.0,
            header_auth,
            client,
            limits: self.limits,
            shared: self.shared.clone(),
            shutdown: self.shutdown.0.subscribe(),
            sessions: self.sessions.clone(),
            _slot: slot,
        };
        // Tungstenite refuses larger messages before buffering them. Small
        // buffers: a subscriber's messages are small, and the 128 KiB
        // defaults each way would cost ~250 KiB per subscriber. Writing
        // stops past 1 MiB pending, bounding what a stalled client holds.
        let max = self.limits.max_message_bytes;
        let config = WebSocketConfig::default()
            .read_buffer_size(4 * 1024)
            .write_buffer_size(4 * 1024)
            .max_write_buffer_size(1024 * 1024)
            .max_message_size(Some(max))
            .max_frame_size(Some(max));
        // The connection outlives the request; its log lines keep the
        // request's span (and request id).
        let span = tracing::Span::current();
        Ok(websocket
            .config(config)
            .protocols(ALL_WEBSOCKET_PROTOCOLS)
            .on_upgrade(move |socket| connection.run(socket).instrument(span))
            .into_response())
    }
}

/// Tells open WebSockets that the server is stopping: upgraded, they left
/// poem's graceful shutdown, and a cut socket looks like a network failure.
#[derive(Clone, Default)]
pub struct Shutdown(Arc<watch::Sender<bool>>);

impl Shutdown {
    /// Every open connection closes with 1001; new ones close at once.
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }

    /// Resolves once every connection has finished (each holds a receiver).
    pub async fn connections_closed(&self) {
        self.0.closed().await;
    }
}

/// One accepted WebSocket, ready to run once upgraded.
pub struct Connection {
    schema: Api,
    protocol: Protocol,
    /// The upgrade request's `Authorization`, for clients that cannot put it
    /// in `connection_init`'s payload.
    header_auth: Option<String>,
    /// Whose budget the connection's writes count against.
    client: ClientAddr,
    limits: Limits,
    shared: SharedStreams,
    shutdown: watch::Receiver<bool>,
    sessions: SessionWatch,
    _slot: ClientSlot,
}

impl Connection {
    /// Serves the connection until either side ends it.
    pub async fn run(self, socket: WebSocketStream) {
        let (sink, incoming) = socket.split();
        let mut state = State {
            sink,
            incoming,
            conn: self,
            login: None,
            init_received: false,
            data: None,
            authorization: None,
            operations: HashMap::new(),
            streams: SelectAll::new(),
        };
        let end = state.serve().await;
        state.finish(end).await;
    }
}

enum End {
    /// The client went away or cannot be written to: nothing more to send.
    Gone,
    /// The client sent its close frame: finish the handshake.
    ClientClosed,
    /// Close with `code`, after a legacy `connection_error` with `notice`.
    Close {
        code: u16,
        reason: String,
        notice: Option<&'static str>,
    },
}

impl End {
    fn close(code: u16, reason: impl Into<String>) -> Self {
        End::Close {
            code,
            reason: reason.into(),
            notice: None,
        }
    }
}

/// A protocol-level refusal: the close code, its reason, and the message of
/// the `connection_error` legacy clients get first (they show that one).
struct Refusal {
    code: u16,
    reason: &'static str,
    legacy: &'static str,
}

const INIT_TIMEOUT: Refusal = Refusal {
    code: 4408,
    reason: "Connection initialisation timeout",
    legacy: "connection initialisation timeout",
};
const FORBIDDEN: Refusal = Refusal {
    code: 4403,
    reason: "Forbidden",
    legacy: "the login token is invalid or expired",
};
const UNAUTHORIZED: Refusal = Refusal {
    code: 4401,
    reason: "Unauthorized",
    legacy: "send connection_init and wait for connection_ack first",
};
const TOO_MANY_INITS: Refusal = Refusal {
    code: 4429,
    reason: "Too many initialisation requests",
    legacy: "too many initialisation requests",
};
/// The login the connection was authenticated with ended (`logOut` on any
/// instance, expiry, revocation): what it authorised stops.
const SESSION_ENDED: Refusal = Refusal {
    code: 4403,
    reason: "Forbidden: the login session ended",
    legacy: "the login session ended (logged out or expired); connect again",
};
const INTERNAL: Refusal = Refusal {
    code: 1011,
    reason: "Internal server error",
    legacy: "internal server error",
};

/// An incoming protocol message, before it is checked against the protocol.
#[derive(serde::Deserialize)]
struct Incoming {
    #[serde(rename = "type")]
    kind: String,
    id: Option<String>,
    payload: Option<Value>,
}

/// An outgoing protocol message.
#[derive(Serialize)]
struct Outgoing<'a, P: Serialize> {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<P>,
}

/// One result of an operation: a response of its own, or a shared
/// stream's payload, serialised once for all its subscribers.
enum Payload {
    Own(Box<Response>),
    Shared(Arc<str>),
}

type Item = (Arc<str>, Option<Payload>);

struct State {
    /// The write half, where every write is bounded in time.
    sink: SplitSink<WebSocketStream, Message>,
    incoming: SplitStream<WebSocketStream>,
    conn: Connection,
    /// The login this connection was authenticated with, watched until it
    /// ends (None: anonymous).
    login: Option<Watched>,
    init_received: bool,
    /// The connection's data once acknowledged: its session and loaders.
    data: Option<Arc<Data>>,
    /// The acknowledged `Authorization`, for the queries and mutations.
    authorization: Option<String>,
    /// Running operations by client id; aborting a handle ends its stream.
    operations: HashMap<Arc<str>, AbortHandle>,
    /// The operations' responses; each stream ends with `(id, None)`.
    streams: SelectAll<BoxStream<'static, Item>>,
}

impl State {
    async fn serve(&mut self) -> End {
        let init_deadline = tokio::time::sleep(self.conn.limits.init_timeout);
        tokio::pin!(init_deadline);
        let period = self.conn.limits.keep_alive;
        let mut keep_alive = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        keep_alive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let step = tokio::select! {
                _ = stopping(&mut self.conn.shutdown) => Err(End::close(1001, "server shutting down")),
                _ = &mut init_deadline, if !self.init_received => Err(self.refuse(INIT_TIMEOUT)),
                frame = self.incoming.next() => self.on_frame(frame).await,
                Some((id, response)) = self.streams.next(), if !self.streams.is_empty() => {
                    self.on_response(id, response).await
                }
                _ = keep_alive.tick() => {
                    let ping = match self.conn.protocol {
                        Protocol::SubscriptionsTransportWS => {
                            Message::Text(r#"{"type":"ka"}"#.into())
                        }
                        Protocol::GraphQLWS => Message::Ping(Vec::new()),
                    };
                    self.write(ping).await
                }
                _ = login_ended(&mut self.login) => Err(self.refuse(SESSION_ENDED)),
            };
            if let Err(end) = step {
                return end;
            }
        }
    }

    /// Stops every operation, then closes as `end` says.
    async fn finish(mut self, end: End) {
        self.operations.clear();
        self.streams = SelectAll::new();
        match end {
            End::Gone => return,
            End::ClientClosed => {}
            End::Close {
                code,
                reason,
                notice,
            } => {
                tracing::debug!(code, %reason, "closing WebSocket");
                let notice = notice.map(|message| Message::Text(connection_error(message)));
                for message in notice
                    .into_iter()
                    .chain([Message::close_with(code, reason)])
                {
                    if self.write(message).await.is_err() {
                        return;
                    }
                }
            }
        }
        // Reading on lets tungstenite complete the close handshake.
        let drain = async { while let Some(Ok(_)) = self.incoming.next().await {} };
        let _ = tokio::time::timeout(CLOSE_WAIT, drain).await;
    }

    async fn on_frame(&mut self, frame: Option<std::io::Result<Message>>) -> Result<(), End> {
        match frame {
            None => Err(End::Gone),
            Some(Ok(Message::Text(text))) => self.on_message(text.as_bytes()).await,
            Some(Ok(Message::Binary(bytes))) => self.on_message(&bytes).await,
            Some(Ok(Message::Close(_))) => Err(End::ClientClosed),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => Ok(()),
            // poem keeps only the text of tungstenite's capacity error.
            Some(Err(e)) if e.kind() == ErrorKind::Other && e.to_string().contains("too long") => {
                tracing::debug!(error = %e, "WebSocket message over the limit");
                Err(End::close(1009, "message too big"))
            }
            Some(Err(e)) if e.kind() == ErrorKind::Other => {
                tracing::debug!(error = %e, "WebSocket protocol error");
                Err(End::close(1002, "protocol error"))
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "WebSocket read failed");
                Err(End::Gone)
            }
        }
    }

    async fn on_message(&mut self, bytes: &[u8]) -> Result<(), End> {
        let Ok(message) = serde_json::from_slice::<Incoming>(bytes) else {
            return Err(self.invalid("invalid message"));
        };
        let transport = self.conn.protocol == Protocol::GraphQLWS;
        match (message.kind.as_str(), transport) {
            ("connection_init", _) => self.init(message.payload).await,
            ("subscribe", true) | ("start", false) => {
                self.subscribe(message.id, message.payload).await
            }
            ("complete", true) => {
                // The client knows it stopped: the protocol wants no reply.
                self.stop(message.id.as_deref());
                Ok(())
            }
            ("stop", false) => match message.id {
                Some(id) if self.stop(Some(&id)) => {
                    self.send("complete", Some(&id), None::<()>).await
                }
                _ => Ok(()),
            },
            ("ping", true) => self.send("pong", None, None::<()>).await,
            ("pong", true) => Ok(()),
            ("connection_terminate", false) => Err(End::close(1000, "connection terminated")),
            _ => Err(self.invalid("unknown message type")),
        }
    }

    async fn init(&mut self, payload: Option<Value>) -> Result<(), End> {
        if self.init_received {
            return Err(self.refuse(TOO_MANY_INITS));
        }
        self.init_received = true;
        let from_payload = match &payload {
            None | Some(Value::Null) => None,
            Some(Value::Object(fields)) => payload_authorization(fields),
            Some(_) => return Err(self.invalid("connection_init payload must be an object")),
        };
        let auth = from_payload.or_else(|| self.conn.header_auth.clone());
        let session = match authenticate(&self.conn.schema.state.store, auth.as_deref()).await {
            Ok(session) => {
                self.login = session
                    .token()
                    .map(|token| self.conn.sessions.watch(&token_hash(token)));
                self.authorization = session.token().and(auth);
                session
            }
            Err(AppError::Forbidden(_)) => return Err(self.refuse(FORBIDDEN)),
            Err(e) => {
                tracing::error!(error = ?e, "WebSocket connection_init: session lookup failed");
                return Err(self.refuse(INTERNAL));
            }
        };
        self.data = Some(Arc::new(
            RequestContext::new(&self.conn.schema.state, session, self.conn.client)
                .into_connection_data(),
        ));
        self.send("connection_ack", None, None::<()>).await
    }

    async fn subscribe(&mut self, id: Option<String>, payload: Option<Value>) -> Result<(), End> {
        let Some(id) = id.filter(|id| !id.is_empty()) else {
            return Err(self.invalid("subscribe needs an id"));
        };
        let named = payload.and_then(|p| Some((crate::trusted::document_of(&p).ok()?, p)));
        let request = named.and_then(|(id, p)| Some((serde_json::from_value(p).ok()?, id)));
        let Some((mut request, mut document_id)) = request else {
            return Err(self.invalid("invalid subscribe payload"));
        };
        let Some(data) = self.data.clone() else {
            return Err(self.refuse(UNAUTHORIZED));
        };
        if self.operations.contains_key(id.as_str()) {
            let message = format!("Subscriber for {} already exists", echo(&id));
            return match self.conn.protocol {
                Protocol::GraphQLWS => Err(End::close(4409, message)),
                Protocol::SubscriptionsTransportWS => {
                    self.send_error(&id, AppError::bad_input("id", message))
                        .await
                }
            };
        }
        if self.operations.len() >= self.conn.limits.max_subscriptions {
            let max = self.conn.limits.max_subscriptions;
            return self
                .send_error(&id, AppError::TooManySubscriptions { max })
                .await;
        }
        // A subscription's text is needed to tell it from a query.
        let persisted = &self.conn.schema.state.persisted;
        match persisted.resolve_trusted(&mut request, document_id.as_deref()) {
            Ok(true) => document_id = None,
            Ok(false) => {}
            Err(e) => return self.send_error(&id, e).await,
        }
        let id: Arc<str> = id.into();
        let key = id.clone();
        let payloads = if self.is_subscription(&request) {
            match self.conn.shared.join(&self.conn.schema, request) {
                Ok(shared) => shared.map(Payload::Shared).boxed(),
                Err(request) => self
                    .conn
                    .schema
                    .execute_stream(*request, Some(data))
                    .map(|response| Payload::Own(Box::new(response)))
                    .boxed(),
            }
        } else {
            // A query or mutation runs through the request pipeline, as
            // over HTTP: the same cache, budget and templates.
            let ask = PipelineRequest {
                request,
                document_id,
                authorization: self.authorization.clone(),
                client: self.conn.client,
                queries_only: false,
                with_cost: false,
            };
            let api = self.conn.schema.clone();
            stream::once(async move { answered(pipeline::run(&api, ask).await) }).boxed()
        };
        let responses = payloads
            .map(Some)
            .chain(stream::once(async { None }))
            .map(move |response| (id.clone(), response));
        let (responses, handle) = stream::abortable(responses);
        self.operations.insert(key, handle);
        self.streams.push(responses.boxed());
        Ok(())
    }

    /// Whether `request` runs a subscription (a request the limits refuse
    /// is not one: its refusal comes from the pipeline).
    fn is_subscription(&self, request: &async_graphql::Request) -> bool {
        matches!(
            self.conn.schema.guard.check(request),
            Ok(Some(checked)) if checked.operation == OperationType::Subscription
        )
    }

    /// Ends the operation `id`; whether it was running.
    fn stop(&mut self, id: Option<&str>) -> bool {
        let handle = id.and_then(|id| self.operations.remove(id));
        handle.map(|handle| handle.abort()).is_some()
    }

    async fn on_response(&mut self, id: Arc<str>, response: Option<Payload>) -> Result<(), End> {
        let kind = match self.conn.protocol {
            Protocol::GraphQLWS => "next",
            Protocol::SubscriptionsTransportWS => "data",
        };
        match response {
            Some(Payload::Own(response)) => self.send(kind, Some(&id), Some(&response)).await,
            Some(Payload::Shared(payload)) => {
                let text = frame(&id, kind, &payload).map_err(|e| {
                    tracing::error!(error = %e, "serialising a WebSocket message id");
                    self.refuse(INTERNAL)
                })?;
                self.write(Message::Text(text)).await
            }
            None => {
                self.operations.remove(&*id);
                self.send("complete", Some(&id), None::<()>).await
            }
        }
    }

    /// An `error` message for operation `id`: a list of GraphQL errors in
    /// `graphql-transport-ws`, a single one in the legacy protocol.
    async fn send_error(&mut self, id: &str, error: AppError) -> Result<(), End> {
        let error = error.into_server_error();
        match self.conn.protocol {
            Protocol::GraphQLWS => self.send("error", Some(id), Some([error])).await,
            Protocol::SubscriptionsTransportWS => self.send("error", Some(id), Some(error)).await,
        }
    }

    async fn send<P: Serialize>(
        &mut self,
        kind: &'static str,
        id: Option<&str>,
        payload: Option<P>,
    ) -> Result<(), End> {
        let text = serde_json::to_string(&Outgoing { id, kind, payload }).map_err(|e| {
            tracing::error!(error = %e, "serialising a WebSocket message");
            self.refuse(INTERNAL)
        })?;
        self.write(Message::Text(text)).await
    }

    /// Sends and flushes `message`. A client that has not taken it in time
    /// stopped reading: it is dropped, holding no memory nor subscriptions.
    async fn write(&mut self, message: Message) -> Result<(), End> {
        let timeout = self.conn.limits.send_timeout;
        match tokio::time::timeout(timeout, self.sink.send(message)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "WebSocket write failed");
                Err(End::Gone)
            }
            Err(_) => {
                tracing::info!(
                    timeout_secs = timeout.as_secs_f64(),
                    "dropping a WebSocket client that stopped reading"
                );
                Err(End::Gone)
            }
        }
    }

    fn refuse(&self, refusal: Refusal) -> End {
        End::Close {
            code: refusal.code,
            reason: refusal.reason.to_owned(),
            notice: (self.conn.protocol == Protocol::SubscriptionsTransportWS)
                .then_some(refusal.legacy),
        }
    }

    /// A message the protocol does not allow: 4400 with a short, fixed reason.
    fn invalid(&self, reason: &'static str) -> End {
        self.refuse(Refusal {
            code: 4400,
            reason,
            legacy: reason,
        })
    }
}

/// Resolves once the server is stopping.
async fn stopping(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stopping| *stopping).await;
}

/// Resolves when the connection's login ends; never for an anonymous one.
async fn login_ended(login: &mut Option<Watched>) {
    match login {
        Some(login) => login.ended().await,
        None => std::future::pending().await,
    }
}

/// The pipeline's answer as one result of an operation: a body is sent as
/// it was serialised (and cached), anything else as a response.
fn answered(answer: pipeline::PipelineResponse) -> Payload {
    match answer.outcome {
        ResponseContent::Body { body, .. } => match std::str::from_utf8(body.body()) {
            Ok(text) => Payload::Shared(Arc::from(text)),
            Err(_) => Payload::Own(Box::new(crate::graphql::rejection(AppError::Internal(
                "a response body was not UTF-8".to_owned(),
            )))),
        },
        ResponseContent::RequestError(response) => Payload::Own(Box::new(response)),
        ResponseContent::Refused(e) => Payload::Own(Box::new(crate::graphql::rejection(e))),
    }
}

/// The session a connection runs as: anonymous without `Authorization`;
/// a malformed, unknown or expired one is `Forbidden`, not made anonymous,
/// so a client with a stale token finds out.
async fn authenticate(store: &Store, auth: Option<&str>) -> AppResult<Session> {
    let Some(auth) = auth else {
        return Ok(Session::from_authorization(None));
    };
    let session = Session::from_authorization(Some(auth));
    if session.token().is_none() {
        return Err(AppError::Forbidden("malformed Authorization"));
    }
    match session.user(store).await? {
        Some(_) => Ok(session),
        None => Err(AppError::Forbidden("invalid or expired login token")),
    }
}

/// `Authorization` from a `connection_init` payload, in any letter case; a
/// value that is not a string counts as a malformed one.
fn payload_authorization(fields: &serde_json::Map<String, Value>) -> Option<String> {
    let (_, value) = fields
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))?;
    match value {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        _ => Some(String::new()),
    }
}

/// The message [`Outgoing`] would write around an already serialised
/// payload; only the id is escaped.
fn frame(id: &str, kind: &str, payload: &str) -> serde_json::Result<String> {
    let id = serde_json::to_string(id)?;
    Ok(format!(
        r#"{{"id":{id},"type":"{kind}","payload":{payload}}}"#
    ))
}

fn connection_error(message: &str) -> String {
    serde_json::json!({ "type": "connection_error", "payload": { "message": message } }).to_string()
}

/// `id` as it may be echoed: at most [`MAX_ECHOED_ID`] characters.
fn echo(id: &str) -> String {
    match id.char_indices().nth(MAX_ECHOED_ID) {
        Some((cut, _)) => format!("{}…", &id[..cut]),
        None => id.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_ids_keep_close_reasons_short() {
        let id = "é".repeat(500);
        let reason = format!("Subscriber for {} already exists", echo(&id));
        assert!(reason.len() <= 123, "{} bytes", reason.len());
        assert_eq!(echo("abc"), "abc");
    }

    #[test]
    fn fixed_reasons_fit_a_close_frame() {
        for refusal in [
            INIT_TIMEOUT,
            FORBIDDEN,
            UNAUTHORIZED,
            TOO_MANY_INITS,
            SESSION_ENDED,
            INTERNAL,
        ] {
            assert!(refusal.reason.len() <= 123);
        }
    }

    #[test]
    fn shared_frames_match_serialised_ones() {
        let payload = r#"{"data":{"scoreChanged":{"votes":2}}}"#;
        let value: Value = serde_json::from_str(payload).unwrap();
        for id in ["1", "a \"quoted\" \\ id\n", "é"] {
            let assembled = frame(id, "next", payload).unwrap();
            let serialised = serde_json::to_string(&Outgoing {
                id: Some(id),
                kind: "next",
                payload: Some(&value),
            })
            .unwrap();
            assert_eq!(assembled, serialised);
        }
    }
}
