//! What browsers, mobile apps and CDNs see: `Cache-Control` and `ETag` on
//! anonymous GET queries (`304` on `If-None-Match`), `private, no-store`
//! on everything else, compression by `Accept-Encoding` with the cached
//! response's compressed forms reused, the GraphiQL assets' codings, and
//! CORS (`Vary: Origin`, only `GET` and `POST`).

use std::io::Read;

use reqwest::header::HeaderMap;
use serde_json::{json, Value};

use crate::helpers::{spawn_app, spawn_app_with, TestApp};

const PUBLIC: &str = "public, max-age=1, stale-while-revalidate=10";
const PRIVATE: &str = "private, no-store";
/// A page long enough to be compressed (over 1 KiB with 12 articles).
const PAGE: &str =
    "{ articles(pageSize: 25) { id title link slug poster { name } postedAt votes score groups } }";

async fn seeded() -> (TestApp, String) {
    let app = spawn_app().await;
    let token = app.sign_up("alice").await;
    for i in 0..12 {
        app.post(
            &token,
            &format!("an article with a long enough title {i}"),
            &["rust"],
        )
        .await;
    }
    (app, token)
}

/// GETs `query` with extra headers; (status, headers, raw body bytes).
async fn get(app: &TestApp, query: &str, headers: &[(&str, &str)]) -> (u16, HeaderMap, Vec<u8>) {
    let mut request = app
        .client
        .get(format!("{}/graphql", app.address))
        .query(&[("query", query)]);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.bytes().await.unwrap().to_vec())
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap())
}

/// Every `Vary` value, lower-cased.
fn vary(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all("vary")
        .iter()
        .flat_map(|v| v.to_str().unwrap().split(','))
        .map(|v| v.trim().to_ascii_lowercase())
        .collect()
}

fn decode(encoding: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match encoding {
        "gzip" => {
            flate2::read::GzDecoder::new(body)
                .read_to_end(&mut out)
                .unwrap();
        }
        "br" => brotli::BrotliDecompress(&mut &body[..], &mut out).unwrap(),
        "zstd" => out = zstd::stream::decode_all(body).unwrap(),
        other => panic!("unexpected coding {other}"),
    }
    out
}

#[tokio::test]
async fn anonymous_get_queries_are_cacheable_and_revalidate_with_304() {
    let (app, token) = seeded().await;
    let (status, headers, body) = get(&app, PAGE, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "cache-control"), Some(PUBLIC));
    let etag = header(&headers, "etag").expect("an ETag").to_owned();
    assert!(
        etag.starts_with('"') && etag.ends_with('"'),
        "strong: {etag}"
    );
    for name in ["accept", "accept-encoding", "authorization", "origin"] {
        assert!(vary(&headers).contains(&name.to_owned()), "Vary {name}");
    }

    // Revalidation: the same representation is a 304 without a body…
    for tag in [
        etag.clone(),
        format!("W/{etag}"),
        format!("\"nope\", {etag}"),
    ] {
        let (status, headers, body) = get(&app, PAGE, &[("if-none-match", &tag)]).await;
        assert_eq!(status, 304, "{tag}");
        assert!(body.is_empty());
        assert_eq!(header(&headers, "etag"), Some(etag.as_str()));
        assert_eq!(header(&headers, "cache-control"), Some(PUBLIC));
    }
    // …another tag is a full answer.
    let (status, _, again) = get(&app, PAGE, &[("if-none-match", "\"other\"")]).await;
    assert_eq!((status, &again), (200, &body));

    // A changed page has a new tag, and the old one no longer matches.
    let vote = app.vote(&app.sign_up("bob").await, "1").await;
    assert!(vote.get("errors").is_none(), "{vote}");
    let (status, headers, changed) = get(&app, PAGE, &[("if-none-match", &etag)]).await;
    assert_eq!(status, 200);
    assert_ne!(changed, body);
    assert_ne!(header(&headers, "etag"), Some(etag.as_str()));

    // Other media types and codings are other representations: other tags.
    let (_, gr, _) = get(
        &app,
        PAGE,
        &[("accept", "application/graphql-response+json")],
    )
    .await;
    let (_, br, _) = get(&app, PAGE, &[("accept-encoding", "br")]).await;
    let tags = [&headers, &gr, &br].map(|h| header(h, "etag").unwrap().to_owned());
    assert!(
        tags[0] != tags[1] && tags[1] != tags[2] && tags[0] != tags[2],
        "{tags:?}"
    );

    // Everything else is private and never stored.
    let url = format!("{}/graphql", app.address);
    let private = [
        (
            "logged in",
            app.client
                .get(&url)
                .query(&[("query", PAGE)])
                .bearer_auth(&token),
        ),
        (
            "a POSTed query",
            app.client.post(&url).json(&json!({ "query": PAGE })),
        ),
        (
            "a mutation",
            app.client
                .post(&url)
                .bearer_auth(&token)
                .json(&json!({ "query": "mutation { logOut }" })),
        ),
        (
            "an error",
            app.client
                .get(&url)
                .query(&[("query", "{ article(id: \"x\") { id } }")]),
        ),
        (
            "a refusal",
            app.client.get(&url).query(&[("query", "{ articles { ")]),
        ),
        (
            "a cost report",
            app.client
                .get(&url)
                .query(&[("query", PAGE)])
                .header("x-query-cost", "1"),
        ),
    ];
    for (name, request) in private {
        let response = request.send().await.unwrap();
        assert_eq!(
            header(response.headers(), "cache-control"),
            Some(PRIVATE),
            "{name}"
        );
        assert!(response.headers().get("etag").is_none(), "{name}");
    }
}

#[tokio::test]
async fn responses_are_compressed_by_accept_encoding_and_cached_forms_are_reused() {
    let (app, token) = seeded().await;
    let (_, headers, plain) = get(&app, PAGE, &[]).await;
    assert!(plain.len() > 1024, "{} bytes", plain.len());
    assert!(header(&headers, "content-encoding").is_none());
    // (forms made, cache misses) so far.
    let counters = || async {
        let cache = app.health().await["responseCache"].clone();
        (
            cache["compressions"].as_u64().unwrap(),
            cache["misses"].as_u64().unwrap(),
        )
    };

    for (accept, coding) in [
        ("gzip, deflate, br, zstd", "zstd"),
        ("gzip, deflate, br", "br"),
        ("gzip", "gzip"),
        ("br;q=0.5, gzip;q=1", "gzip"),
    ] {
        let (_, headers, body) = get(&app, PAGE, &[("accept-encoding", accept)]).await;
        assert_eq!(
            header(&headers, "content-encoding"),
            Some(coding),
            "{accept}"
        );
        assert!(vary(&headers).contains(&"accept-encoding".to_owned()));
        assert!(
            body.len() * 3 < plain.len(),
            "{coding}: {} bytes",
            body.len()
        );
        assert_eq!(decode(coding, &body), plain, "{coding}");
        // The next request for a coding is served the kept form: a cache
        // hit makes no new compression. (Should the page have expired in
        // between, the miss recomputes it; nothing is asserted then.)
        let (made, misses) = counters().await;
        let (_, _, again) = get(&app, PAGE, &[("accept-encoding", accept)]).await;
        let (made_after, misses_after) = counters().await;
        assert_eq!(again, body, "{accept}");
        if misses_after == misses {
            assert_eq!(made_after, made, "{accept}: a hit compressed again");
        }
    }
    let (made, _) = counters().await;
    assert!(made >= 3, "one form per coding was made: {made}");

    // Small bodies are sent as they are.
    let (_, headers, _) = get(
        &app,
        "{ articleCount }",
        &[("accept-encoding", "gzip, br, zstd")],
    )
    .await;
    assert!(header(&headers, "content-encoding").is_none());

    // Responses that are not cached are compressed too.
    let response = app
        .client
        .post(format!("{}/graphql", app.address))
        .bearer_auth(&token)
        .header("accept-encoding", "br")
        .json(&json!({ "query": PAGE }))
        .send()
        .await
        .unwrap();
    assert_eq!(header(response.headers(), "content-encoding"), Some("br"));
    let body = decode("br", &response.bytes().await.unwrap());
    let page: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(page["data"]["articles"].as_array().unwrap().len(), 12);
}

#[tokio::test]
async fn graphiql_assets_vary_by_coding_and_brotli_is_the_smallest() {
    let app = spawn_app().await;
    let url = format!("{}/assets/graphiql/graphiql.min.js", app.address);
    let fetch = |coding: &'static str| {
        let request = app.client.get(&url).header("accept-encoding", coding);
        async move {
            let response = request.send().await.unwrap();
            let headers = response.headers().clone();
            (headers, response.bytes().await.unwrap().to_vec())
        }
    };
    let (headers, plain) = fetch("identity").await;
    assert!(vary(&headers).contains(&"accept-encoding".to_owned()));
    assert!(header(&headers, "content-encoding").is_none());
    let (gzip_headers, gzip) = fetch("gzip").await;
    let (br_headers, br) = fetch("gzip, deflate, br, zstd").await;
    assert_eq!(header(&gzip_headers, "content-encoding"), Some("gzip"));
    assert_eq!(header(&br_headers, "content-encoding"), Some("br"));
    assert!(vary(&br_headers).contains(&"accept-encoding".to_owned()));
    assert!(
        br.len() <= gzip.len(),
        "br {} > gzip {}",
        br.len(),
        gzip.len()
    );
    assert!(gzip.len() * 3 < plain.len());
    assert_eq!(decode("br", &br), plain);
    assert_eq!(decode("gzip", &gzip), plain);
}

#[tokio::test]
async fn cors_varies_on_origin_and_allows_only_the_served_methods() {
    let app = spawn_app().await;
    let url = format!("{}/graphql", app.address);
    // With or without an Origin, the answer says it depends on it, beside
    // what the handler's own Vary says.
    for origin in [None, Some("https://spa.example")] {
        let mut request = app.client.get(&url).query(&[("query", "{ articleCount }")]);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        let response = request.send().await.unwrap();
        let vary = vary(response.headers());
        assert!(vary.contains(&"origin".to_owned()), "{origin:?}: {vary:?}");
        assert!(
            vary.contains(&"accept-encoding".to_owned()),
            "{origin:?}: {vary:?}"
        );
        assert_eq!(
            header(response.headers(), "access-control-allow-origin"),
            origin,
        );
    }
    let preflight = |method: &'static str| {
        app.client
            .request(reqwest::Method::OPTIONS, &url)
            .header("origin", "https://spa.example")
            .header("access-control-request-method", method)
            .header(
                "access-control-request-headers",
                "authorization, content-type",
            )
            .send()
    };
    for method in ["GET", "POST"] {
        let response = preflight(method).await.unwrap();
        assert!(response.status().is_success(), "{method}");
        let headers = response.headers();
        assert_eq!(
            header(headers, "access-control-allow-methods"),
            Some("GET, POST")
        );
        assert_eq!(
            header(headers, "access-control-allow-origin"),
            Some("https://spa.example")
        );
        assert!(vary(headers).contains(&"origin".to_owned()));
    }
    for method in ["PUT", "DELETE", "PATCH"] {
        let response = preflight(method).await.unwrap();
        assert_eq!(response.status(), 403, "{method}");
        assert!(response
            .headers()
            .get("access-control-allow-origin")
            .is_none());
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["errors"][0]["extensions"]["code"], "FORBIDDEN");
    }

    // An empty list allows no origin at all (and no Origin, no CORS).
    let closed = spawn_app_with(|s| s.cors_origins = vec![String::new()]).await;
    let refused = closed
        .client
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/graphql", closed.address),
        )
        .header("origin", "https://spa.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    assert!(refused
        .headers()
        .get("access-control-allow-origin")
        .is_none());
}
