/// `schema.graphql` is generated from the code; regenerate it with
/// `UPDATE_SCHEMA=1 cargo test schema`.
#[test]
fn schema_graphql_matches_the_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schema.graphql");
    let sdl = votegraph_api::graphql::sdl();
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(path, &sdl).expect("write schema.graphql");
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == sdl,
        "schema.graphql is out of date with the code; run `UPDATE_SCHEMA=1 cargo test schema` and commit it"
    );
}

#[test]
fn the_schema_has_the_contracted_shape() {
    let sdl = votegraph_api::graphql::sdl();
    for line in [
        "articles(order: ArticleOrder! = SCORE, page: Int! = 1, pageSize: Int! = 25): [Article!]!",
        "article(id: ID!): Article",
        "group(name: String!): Group!",
        "me: User",
        "signUp(name: String!, password: String!): AuthPayload!",
        "logIn(name: String!, password: String!): AuthPayload!",
        "logOut: Boolean!",
        "post(title: String!, link: String!, groups: [String!]! = []): Article!",
        "setGroups(articleId: ID!, add: [String!]! = [], remove: [String!]! = []): Article!",
        "postedAt: DateTime!",
        "score: Float!",
        "type Query {",
        "type Mutation {",
        "enum ArticleOrder {",
        "interface Node {",
        "node(id: ID!): Node",
        "nodes(ids: [ID!]!): [Node]!",
        "type Article implements Node {",
        "type User implements Node {",
        "type Group implements Node {",
        // Moderation's contract.
        "role: Role!",
        "banned: Boolean!",
        "bannedUntil: DateTime",
        "status: ArticleStatus",
        "removalReason: String",
        "flags: Int",
        "setRole(name: String!, role: Role!): User!",
        "flag(articleId: ID!, reason: String): Article!",
        "unflag(articleId: ID!): Article!",
        "removeArticle(articleId: ID!, reason: String!): Article!",
        "restoreArticle(articleId: ID!, reason: String): Article!",
        "banUser(name: String!, reason: String!, until: DateTime, removeArticles: Boolean! = false): User!",
        "unbanUser(name: String!, reason: String): User!",
        "moderationQueue(first: Int! = 25, after: String): ArticleConnection!",
        "modLog(first: Int! = 25, after: String, action: ModAction, user: String, articleId: ID): ModLogConnection!",
        "articleRemoved(group: String): ID!",
    ] {
        assert!(sdl.contains(line), "schema lacks `{line}`:\n{sdl}");
    }
}
