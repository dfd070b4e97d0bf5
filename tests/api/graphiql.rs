use crate::helpers::spawn_app;

#[tokio::test]
async fn graphiql_and_its_assets_are_served_locally() {
    let app = spawn_app().await;
    let page = app
        .client
        .get(format!("{}/", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("GraphiQL.createFetcher"));
    assert!(!html.contains("https://"), "no CDN: every script is local");

    let scripts: Vec<&str> = html
        .split("src=\"")
        .skip(1)
        .chain(html.split("href=\"").skip(1))
        .filter_map(|rest| rest.split('"').next())
        .filter(|url| url.starts_with("/assets/"))
        .collect();
    assert_eq!(scripts.len(), 5, "{scripts:?}");
    for path in scripts {
        // reqwest is built without decompression: the body stays gzip.
        let response = app
            .client
            .get(format!("{}{path}", app.address))
            .header("accept-encoding", "gzip")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let kind = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            kind.starts_with("text/javascript") || kind.starts_with("text/css"),
            "{path}: {kind}"
        );
        assert_eq!(response.headers()["content-encoding"], "gzip", "{path}");
        assert!(!response.bytes().await.unwrap().is_empty());
    }
    let missing = app
        .client
        .get(format!("{}/assets/graphiql/nope.js", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}
