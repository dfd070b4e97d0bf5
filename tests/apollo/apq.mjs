// Apollo Client 4 with its persisted-queries link, as an app would set it
// up (hashed queries over GET), against the server at process.argv[2].
// Runs one query with two fresh clients (so the second cannot answer from
// Apollo's own cache) and prints, as JSON, every HTTP exchange the link
// made and the data each client got. tests/api/persisted.rs checks both.
import { createHash } from "node:crypto";
import { ApolloClient, HttpLink, InMemoryCache, gql } from "@apollo/client";
import { PersistedQueryLink } from "@apollo/client/link/persisted-queries";

const uri = process.argv[2];
const exchanges = [];

async function recordingFetch(input, init) {
  const response = await fetch(input, init);
  const text = await response.clone().text();
  exchanges.push({
    method: init?.method ?? "GET",
    url: String(input),
    requestBody: init?.body ?? null,
    accept: new Headers(init?.headers).get("accept"),
    status: response.status,
    contentType: response.headers.get("content-type"),
    cacheControl: response.headers.get("cache-control"),
    etag: response.headers.get("etag"),
    body: text,
  });
  return response;
}

function client() {
  const persisted = new PersistedQueryLink({
    sha256: (text) => createHash("sha256").update(text).digest("hex"),
    useGETForHashedQueries: true,
  });
  return new ApolloClient({
    link: persisted.concat(new HttpLink({ uri, fetch: recordingFetch })),
    cache: new InMemoryCache(),
  });
}

const FRONT_PAGE = gql`
  query FrontPage {
    articles(pageSize: 5) {
      id
      title
      votes
    }
    articleCount
  }
`;

const results = [];
for (let i = 0; i < 2; i++) {
  const { data, error } = await client().query({ query: FRONT_PAGE, fetchPolicy: "network-only" });
  results.push({ data: data ?? null, error: error ? String(error) : null });
}
console.log(JSON.stringify({ exchanges, results }));
