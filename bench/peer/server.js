'use strict'
// The Node peer votegraph-bench measures beside votegraph: Fastify +
// Mercurius serving the part of votegraph's schema a front page uses, from
// the same Redis keys, written the way a competent Node engineer would for
// a fair fight:
//
// - Mercurius with `jit: 1` (graphql-jit compiles a query the second time
//   it is seen) and its parsed-query cache; no response cache, because
//   votegraph's logged-in path has none either.
// - One Mercurius loader (its DataLoader integration) on `Query.articles`:
//   every ranking field of one request is read in one round trip, then all
//   their articles — hash and the caller's vote checks — in one ioredis
//   pipeline. An article's fields all come from one hash, so the list, not
//   the field, is the unit worth batching; loaders on each Article field
//   would only add a batch per field and a third round trip for myVote.
// - The caller's session is read in the same round trip as the ranking,
//   and their votes on a list in one ZMSCORE of votegraph's per-user vote
//   index: the same 28 commands as votegraph's page, so the fight is about
//   the servers, not the queries.
// - One process, one Redis connection (cluster mode off), like one votegraph
//   process; ioredis multiplexes every request's commands over it.
//
// The bench starts it with `--max-semi-space-size=64` (see `peer.rs`).
// Configured by the environment: PEER_PORT, PEER_REDIS_URL. It exits when
// its standard input closes, so it never outlives the bench that started it.

const crypto = require('node:crypto')
const Fastify = require('fastify')
const mercurius = require('mercurius')
const Redis = require('ioredis')
const { GraphQLScalarType } = require('graphql')

const port = Number(process.env.PEER_PORT || 4000)
// Seconds an article can be voted on (votegraph's keys.rs, the book's week).
const WEEK = 7 * 24 * 60 * 60
const redisUrl = process.env.PEER_REDIS_URL || 'redis://127.0.0.1:6379'

// The subset of votegraph's schema.graphql a front page selects, with the
// same names, types and defaults.
const schema = `
  scalar DateTime

  enum ArticleOrder { SCORE NEWEST }
  enum VoteDirection { UP DOWN NONE }

  type User { name: String! }

  type Article {
    id: ID!
    title: String!
    link: String!
    poster: User!
    postedAt: DateTime!
    votes: Int!
    score: Float!
    groups: [String!]!
    downvotes: Int!
    myVote: VoteDirection
    slug: String!
    views: Int!
  }

  type Query {
    articles(order: ArticleOrder! = SCORE, page: Int! = 1, pageSize: Int! = 25): [Article!]!
  }
`

// The hash fields votegraph reads (src/store/articles.rs ARTICLE_FIELDS),
// in the same order, so both servers ask Redis for the same work.
const ARTICLE_FIELDS = ['title', 'link', 'poster', 'time', 'votes', 'downvotes', 'slug', 'views', 'groups']
const MAX_PAGE = 10000
const MAX_PAGE_SIZE = 100

const redis = new Redis(redisUrl, {
  // RESP2, as votegraph speaks it; no HELLO on connect.
  protocol: 2,
  // Fail a request rather than queue it forever while Redis is away. No
  // `commandTimeout`: ioredis arms a timer per command for it, which a
  // page of 77 commands pays 77 times, and this peer only ever talks to
  // the bench's own Redis on loopback.
  maxRetriesPerRequest: 1
})

/// An instant as votegraph writes it: RFC 3339 in UTC with microseconds.
function rfc3339 (seconds) {
  const micros = Math.round(seconds * 1e6)
  const whole = Math.floor(micros / 1e6)
  const fraction = String(micros - whole * 1e6).padStart(6, '0')
  return new Date(whole * 1000).toISOString().slice(0, 19) + '.' + fraction + 'Z'
}

function number (value) {
  const n = Number(value)
  return value === null || Number.isNaN(n) ? 0 : n
}

function groupsOf (listed) {
  return listed.split(',').filter((g) => g !== '')
}

function badInput (message) {
  return new mercurius.ErrorWithProps(message, { code: 'BAD_USER_INPUT' })
}

/// Reads every `articles` field of one request: their rankings and the
/// caller's session in one round trip, then all their articles in one
/// pipeline (plus one for articles whose hash has no `groups` field, read
/// from their set as votegraph does; seeded and new articles have it).
async function loadArticleLists (queries, ctx) {
  const first = redis.pipeline()
  const ranges = queries.map(({ params }) => {
    const { order, page, pageSize } = params
    if (!(page >= 1 && page <= MAX_PAGE)) {
      return badInput(`page must be between 1 and ${MAX_PAGE}`)
    }
    if (!(pageSize >= 1 && pageSize <= MAX_PAGE_SIZE)) {
      return badInput(`pageSize must be between 1 and ${MAX_PAGE_SIZE}`)
    }
    const start = (page - 1) * pageSize
    if (order === 'NEWEST') {
      first.zrevrange('time:', start, start + pageSize - 1)
    } else {
      first.zrevrange('score:', start, start + pageSize - 1, 'WITHSCORES')
    }
    return order
  })
  const token = ctx.token
  if (token) {
    first.get('session:' + crypto.createHash('sha256').update(token).digest('hex'))
  }
  const firstReplies = await first.exec()
  const user = token ? firstReplies[firstReplies.length - 1][1] : null
  const viewer = user === null ? null : 'user:' + user

  // Every listed article as { id, score }, per query.
  let next = 0
  const lists = ranges.map((order) => {
    if (order instanceof Error) return order
    const [err, reply] = firstReplies[next++]
    if (err) throw err
    const list = []
    const step = order === 'NEWEST' ? 1 : 2
    for (let i = 0; i < reply.length; i += step) {
      // Members that are not `article:<number>` are skipped, and the
      // number is read as a number, as votegraph does.
      const digits = /^article:\+?([0-9]{1,19})$/.exec(reply[i])
      if (digits === null) continue
      const id = digits[1].length > 1 && digits[1][0] === '0' ? BigInt(digits[1]).toString() : digits[1]
      list.push({ id, member: 'article:' + id, score: step === 2 ? Number(reply[i + 1]) : null })
    }
    return list
  })

  const pipe = redis.pipeline()
  for (const list of lists) {
    if (list instanceof Error) continue
    for (const entry of list) {
      pipe.hmget(entry.member, ...ARTICLE_FIELDS)
      if (entry.score === null) pipe.zscore('score:', entry.member)
    }
    // The caller's votes on the list in one command, from the same
    // per-user index votegraph reads (user:<name>:votes, article member →
    // ±post time).
    if (viewer !== null && list.length > 0) {
      pipe.call('ZMSCORE', viewer + ':votes', ...list.map((entry) => entry.member))
    }
  }
  const replies = pipe.length > 0 ? await pipe.exec() : []
  let r = 0
  const reply = () => {
    const [err, value] = replies[r++]
    if (err) throw err
    return value
  }
  const unlisted = []
  const results = lists.map((list) => {
    if (list instanceof Error) return list
    const articles = []
    const read = list.map((entry) => {
      const hash = reply()
      return [hash, entry.score === null ? reply() : entry.score]
    })
    const myVotes = viewer !== null && list.length > 0 ? reply() : []
    const now = Date.now() / 1000
    for (let i = 0; i < list.length; i++) {
      const entry = list[i]
      const [hash, score] = read[i]
      let myVote = null
      if (viewer !== null) {
        // Signed post time: + up, - down; a closed article's vote is gone.
        const signed = myVotes[i] === null ? 0 : Number(myVotes[i])
        const open = Math.abs(signed) + WEEK > now
        myVote = signed > 0 && open ? 'UP' : signed < 0 && open ? 'DOWN' : 'NONE'
      }
      if (hash.every((v) => v === null)) continue
      const [title, link, poster, time, votes, downvotes, slug, views, listed] = hash
      const article = {
        id: entry.id,
        title: title ?? '',
        link: link ?? '',
        poster: { name: poster === null ? '' : poster.startsWith('user:') ? poster.slice(5) : poster },
        postedAt: rfc3339(number(time)),
        votes: Math.trunc(number(votes)),
        score: score === null ? number(time) : Number(score),
        groups: listed === null ? [] : groupsOf(listed),
        downvotes: Math.trunc(number(downvotes)),
        myVote,
        slug: slug === null || slug === '' ? entry.id : slug,
        views: Math.trunc(number(views))
      }
      if (listed === null) unlisted.push(article)
      articles.push(article)
    }
    return articles
  })

  if (unlisted.length > 0) {
    const groupsPipe = redis.pipeline()
    for (const article of unlisted) groupsPipe.smembers('article:' + article.id + ':groups')
    const groupReplies = await groupsPipe.exec()
    unlisted.forEach((article, i) => {
      const [err, members] = groupReplies[i]
      if (err) throw err
      article.groups = members.sort()
    })
  }
  return results
}

const app = Fastify({ logger: false })

app.register(mercurius, {
  schema,
  resolvers: {
    DateTime: new GraphQLScalarType({
      name: 'DateTime',
      serialize: (value) => value
    })
  },
  loaders: {
    Query: { articles: loadArticleLists }
  },
  context: (request) => {
    const header = request.headers.authorization
    const token = typeof header === 'string' && header.startsWith('Bearer ') ? header.slice(7).trim() : ''
    return { token: token === '' ? null : token }
  },
  jit: 1,
  graphiql: false
})

app.get('/health', async (request, reply) => {
  try {
    await redis.ping()
    return { status: 'ok' }
  } catch {
    reply.code(503)
    return { status: 'redis unavailable' }
  }
})

process.stdin.on('end', () => process.exit(0))
process.stdin.on('error', () => process.exit(0))
process.stdin.resume()

app.listen({ host: '127.0.0.1', port }).catch((err) => {
  console.error(`peer: ${err.message}`)
  process.exit(1)
})
