# Redis in Action, chapter 1: listings 1.6-1.10, the book's own Python code,
# for votegraph's tests, which run it against the Redis votegraph uses
# (through tests/book/book.py).
#
# The listings below are copied verbatim from the English text (listings 1.6
# to 1.10, their comments and tabs included) with one change only: the
# transcription typo `def post article(` in listing 1.7 is written
# `def post_article(` (the name the book's prose and listing 1.7's title use),
# as Python cannot parse the other. `import time` is added above them, as the
# book's chapter-1 module has it.
#
# The code targets redis-py 2.x: `zadd(name, member, score)`,
# `zincrby(name, member, amount)`, `hmset`. It runs with redis-py 2.10.6,
# which scripts/ensure-book-python.sh installs into target/book-python.
#
# After the listings comes the chapter's exercise (down votes, and switching
# a vote with SMOVE), which is NOT the book's code: see its own header.

import time

# Listing 1.6 The article_vote()function

# Prepare our constants.
ONE_WEEK_IN_SECONDS = 7 * 86400	
VOTE_SCORE = 432

def article_vote(conn, user, article):
	cutoff = time.time() - ONE_WEEK_IN_SECONDS	# Calculate the cutoff time for voting.
	if conn.zscore('time:', article) < cutoff:	# Check to see if the article can still be voted on (we could use the article HASH here, but scores are returned as floats so we don`t have to cast it).
		return
	article_id = article.partition(':')[-1]		# Get the id portion from the article:id identifier.
	# If the user hasn`t voted for this article before, increment the article score and vote count.
	if conn.sadd('voted:' + article_id, user):
		conn.zincrby('score:', article, VOTE_SCORE)
		conn.hincrby(article, 'votes', 1)

# Listing 1.7 The post_article() function
def post_article(conn, user, title, link):
	article_id = str(conn.incr('article:'))			# Generate a new article id.
	
	voted = 'voted:' + article_id
	# Start with the posting user having voted for the article, and set the article voting information to automatically expire in a week (we descuss expiration in chapter 3).
	conn.sadd(voted, user)
	conn.expire(voted, ONE_WEEK_IN_SECONDS)

	now = time.time()
	article = 'article:' + article_id
	# Create the article hash.
	conn.hmset(article, {
		'title': title,
		'link': link,
		'poster': user,
		'time': now,
		'votes': 1
	})
	# Add the article to the time and score ordered ZSETs.
	conn.zadd('score:', article, now + VOTE_SCORE)
	conn.zadd('time:', article, now)

	return article_id

# Listing 1.8 The get_articles() function
ARTICLES_PER_PAGE = 25

def get_articles(conn, page, order='score:'):
	# Set up the start and end indexes for fetching the articles.
	start = (page-1) * ARTICLES_PER_PAGE
	end = start + ARTICLES_PER_PAGE - 1

	ids = conn.zrevrange(order, start, end)	# Fetch the article ids.
	articles=[]
	# Get the article information from the list of article ids.
	for id in ids:
		article_data = conn.hgetall(id)
		article_data['id'] = id
		articles.append(article_data)
	
	return articles

# Listing 1.9 The add_remove_groups() function
def add_remove_groups(conn, article_id, to_add=[], to_remove=[]):
	article = 'article:' + article_id			# Construct the article information like we did in post_article.
	for group in to_add:
		conn.sadd('group:' + group, article)	# Add the article to groups that it should be a part of.
	for group in to_remove:
		conn.srem('group:' + group, article)	# Remove the article from groups that it should be removed from.

# Listing 1.10 The get_group_articles() function
def get_group_articles(conn, group, page, order='score:'):
	key = order + group						# Create a key for each group and each sort order.
	if not conn.exists(key):				# If we haven`t sorted these articles recently, we should sort them.
		# Actually sort the articles in the group based on score or recency.
		conn.zinterstore(
			key,
			['group:' + group, order],
			aggregate='max'
		)
		conn.expire(key, 60)				# Tell Redis to automatically expire the ZSET in 60 seconds.
	return get_articles(conn, page, key)	# Call our earlier get_articles() function to handle pagination and article data fetching.


# ---------------------------------------------------------------------------
# Exercise (end of section 1.3): down votes, and switching a vote with SMOVE.
#
# NOT the book's code: the book leaves this as an exercise. Written for
# votegraph's tests in the book's style (plain commands, no transaction, like
# listing 1.6) and with votegraph's keys (docs/keyspace.md, docs/api.md):
#   downvoted:<id>   set of the users who down voted, beside voted:<id>;
#                    expires when voting closes, as voted:<id> does
#   article:<id>     hash field `downvotes` (the book's `votes` stays the up votes)
#   score:           post time + 432 * (votes - downvotes)
# A user is in at most one of voted:<id> and downvoted:<id>; switching moves
# them with one SMOVE. Listings 1.6 and 1.7 stay unmodified: article_vote()
# does not look at downvoted:<id>, so a down voter who wants to up vote goes
# through switch_vote() (calling article_vote() would put them in both sets),
# and post_article() writes no `downvotes` field (HINCRBY starts it at 0).
# ---------------------------------------------------------------------------

def article_downvote(conn, user, article):
	cutoff = time.time() - ONE_WEEK_IN_SECONDS	# Calculate the cutoff time for voting, as article_vote() does.
	posted = conn.zscore('time:', article)
	if posted < cutoff:							# Check to see if the article can still be voted on.
		return
	article_id = article.partition(':')[-1]		# Get the id portion from the article:id identifier.
	if conn.sismember('voted:' + article_id, user):	# An up vote is switched with switch_vote(), not added to.
		return
	# If the user hasn`t down voted this article before, decrement the article score and increment the down vote count.
	downvoted = 'downvoted:' + article_id
	if conn.sadd(downvoted, user):
		expire_with_voting(conn, downvoted, posted)
		conn.zincrby('score:', article, -VOTE_SCORE)
		conn.hincrby(article, 'downvotes', 1)

def switch_vote(conn, user, article):
	cutoff = time.time() - ONE_WEEK_IN_SECONDS	# The same voting window as article_vote().
	posted = conn.zscore('time:', article)
	if posted < cutoff:
		return
	article_id = article.partition(':')[-1]
	voted = 'voted:' + article_id
	downvoted = 'downvoted:' + article_id
	# An up vote becomes a down vote with one SMOVE; the score loses the up vote and takes the down vote.
	if conn.smove(voted, downvoted, user):
		expire_with_voting(conn, downvoted, posted)
		conn.zincrby('score:', article, -2 * VOTE_SCORE)
		conn.hincrby(article, 'votes', -1)
		conn.hincrby(article, 'downvotes', 1)
	# A down vote becomes an up vote the same way.
	elif conn.smove(downvoted, voted, user):
		expire_with_voting(conn, voted, posted)
		conn.zincrby('score:', article, 2 * VOTE_SCORE)
		conn.hincrby(article, 'votes', 1)
		conn.hincrby(article, 'downvotes', -1)
	# A user who has not voted has nothing to switch.

def expire_with_voting(conn, voters, posted):
	# A voter set that has no expiry yet (a new downvoted:<id>, or voted:<id>
	# made anew when its last member moved out and back) expires when voting
	# on the article closes, one week after posting, as votegraph's vote does.
	# (redis-py 2.x's Redis answers None for a key without expiry, TTL -1.)
	if conn.ttl(voters) in (None, -1):
		conn.expireat(voters, int(posted + ONE_WEEK_IN_SECONDS) + 1)
