//! One GraphQL-over-WebSocket test client for both protocols: operations
//! and their events, and, for the protocol's edges, close frames, raw
//! text and the socket itself.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::app::TestApp;

pub const TRANSPORT_WS: &str = "graphql-transport-ws";
pub const LEGACY_WS: &str = "graphql-ws";

/// The upgrade request for `/graphql` at `address` (`http://…`), asking
/// for `protocol`; tests may add headers before sending it.
pub fn ws_request(address: &str, protocol: &str) -> Request {
    let url = format!("{}/graphql", address.replacen("http", "ws", 1));
    let mut request = url.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("sec-websocket-protocol", protocol.parse().unwrap());
    request
}

/// What a client saw next.
#[derive(Debug, PartialEq)]
pub enum Seen {
    /// A protocol message (keep-alives skipped).
    Msg(Value),
    /// A close frame: code and reason.
    Closed(u16, String),
    /// The socket ended without a close frame.
    Ended,
}

/// A WebSocket client speaking `protocol` (either of [`TRANSPORT_WS`] and
/// [`LEGACY_WS`]); each operation uses that protocol's message names.
pub struct WsClient {
    pub socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    pub protocol: &'static str,
}

impl WsClient {
    /// Upgraded only: nothing sent yet (see [`WsClient::init`]).
    pub async fn open(address: &str, protocol: &'static str) -> Self {
        let (socket, _) = tokio_tungstenite::connect_async(ws_request(address, protocol))
            .await
            .expect("ws connect");
        Self::over(socket, protocol)
    }

    /// A client on a socket the test upgraded itself.
    pub fn over(
        socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
        protocol: &'static str,
    ) -> Self {
        Self { socket, protocol }
    }

    /// Connects to `address` (`http://…`), checks the server chose
    /// `protocol`, sends `connection_init` with `payload`, and waits for the
    /// ack.
    pub async fn connect_to(address: &str, protocol: &'static str, payload: Value) -> Self {
        let (socket, response) = tokio_tungstenite::connect_async(ws_request(address, protocol))
            .await
            .expect("ws connect");
        assert_eq!(response.headers()["sec-websocket-protocol"], protocol);
        let mut client = Self::over(socket, protocol);
        client.init(payload).await;
        client
    }

    /// Connected to `app` and acknowledged, anonymous.
    pub async fn connect(app: &TestApp, protocol: &'static str) -> Self {
        Self::connect_to(&app.address, protocol, json!({})).await
    }

    /// Sends `connection_init` with `payload`; the next message must be
    /// the ack.
    pub async fn init(&mut self, payload: Value) {
        self.send(json!({ "type": "connection_init", "payload": payload }))
            .await;
        assert_eq!(
            self.next().await,
            Seen::Msg(json!({ "type": "connection_ack" }))
        );
    }

    pub async fn send(&mut self, message: Value) {
        self.send_text(message.to_string()).await;
    }

    pub async fn send_text(&mut self, text: String) {
        self.socket.send(Message::text(text)).await.unwrap();
    }

    /// Starts operation `id` (`subscribe`, or the legacy `start`).
    pub async fn subscribe(&mut self, id: &str, query: &str, variables: Value) {
        self.start(id, json!({ "query": query, "variables": variables }))
            .await;
    }

    /// Like [`WsClient::subscribe`], with a payload of the query alone (no
    /// `variables`).
    pub async fn subscribe_query(&mut self, id: &str, query: &str) {
        self.start(id, json!({ "query": query })).await;
    }

    async fn start(&mut self, id: &str, payload: Value) {
        let kind = if self.protocol == TRANSPORT_WS {
            "subscribe"
        } else {
            "start"
        };
        self.send(json!({ "type": kind, "id": id, "payload": payload }))
            .await;
    }

    /// Stops operation `id` (`complete`, or the legacy `stop`, which the
    /// server answers with a `complete` of its own).
    pub async fn complete(&mut self, id: &str) {
        let kind = if self.protocol == TRANSPORT_WS {
            "complete"
        } else {
            "stop"
        };
        self.send(json!({ "type": kind, "id": id })).await;
    }

    /// The next thing seen, keep-alives skipped; fails after 10 s.
    pub async fn next(&mut self) -> Seen {
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(10), self.socket.next())
                .await
                .expect("nothing within 10 s");
            match frame {
                None | Some(Err(_)) => return Seen::Ended,
                Some(Ok(Message::Close(Some(frame)))) => {
                    return Seen::Closed(frame.code.into(), frame.reason.to_string())
                }
                Some(Ok(Message::Close(None))) => return Seen::Closed(1005, String::new()),
                Some(Ok(Message::Text(text))) => {
                    let message: Value = serde_json::from_str(&text).unwrap();
                    if message["type"] != "ka" && message["type"] != "ping" {
                        return Seen::Msg(message);
                    }
                }
                Some(Ok(_)) => {}
            }
        }
    }

    /// The next protocol message whatever it is (errors included); fails
    /// on the socket's end.
    pub async fn next_raw(&mut self) -> Value {
        match self.next().await {
            Seen::Msg(message) => message,
            other => panic!("expected a message, saw {other:?}"),
        }
    }

    /// The `data` of the next event; fails on an error message.
    pub async fn next_event(&mut self) -> Value {
        let message = self.next_raw().await;
        let kind = message["type"].as_str().unwrap_or_default();
        assert!(
            kind == "next" || kind == "data",
            "expected an event: {message}"
        );
        assert!(message["payload"]["errors"].is_null(), "{message}");
        message["payload"]["data"].clone()
    }

    /// True when nothing arrives within `wait`.
    pub async fn is_quiet(&mut self, wait: Duration) -> bool {
        tokio::time::timeout(wait, self.next()).await.is_err()
    }

    /// The next thing must be a close frame with `code` (and a reason that
    /// fits a close frame); returns the reason.
    pub async fn expect_close(&mut self, code: u16) -> String {
        match self.next().await {
            Seen::Closed(got, reason) => {
                assert_eq!(got, code, "close reason {reason:?}");
                assert!(reason.len() <= 123, "close reason too long: {reason}");
                reason
            }
            other => panic!("expected close {code}, saw {other:?}"),
        }
    }

    /// The legacy protocol's `connection_error`, then the close frame;
    /// returns the error's message.
    pub async fn expect_connection_error(&mut self, code: u16) -> String {
        let Seen::Msg(message) = self.next().await else {
            panic!("expected connection_error")
        };
        assert_eq!(message["type"], "connection_error", "{message}");
        self.expect_close(code).await;
        message["payload"]["message"]
            .as_str()
            .expect("a message")
            .to_owned()
    }

    pub async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }
}
