# -*- coding: utf-8 -*-
# Redis in Action, chapter 1, as transcribed (camelCase) with its unittest
# TestArticle.testArticleFunctionality, ported to Python 3 with the least
# change, to run against the Redis votegraph's tests start:
#
#   BOOK_REDIS_SOCKET=/path/to/redis.sock [BOOK_REDIS_DB=N] \
#     python3 tests/book/ch01_unittest.py
#
# Exits non-zero when the test fails (unittest.main()).
#
# The code blocks are copied from the transcription in order (its prose left
# out) with only these changes:
#   1. This header and the four lines below it (import os and sys; put
#      target/book-python, where scripts/ensure-book-python.sh installs
#      redis-py 2.10.6, first on sys.path; the code targets redis-py 2.x).
#   2. setUp: `redis.Redis(db=15)` became
#      `redis.Redis(unix_socket_path=os.environ['BOOK_REDIS_SOCKET'],
#      db=int(os.environ.get('BOOK_REDIS_DB', '0')), decode_responses=True)`.
#   3. Python 2 print statements became print() calls (`print` -> `print()`,
#      `print x, y` -> `print(x, y)`).
#   4. The line `测试结束,删除所有的数据结构` ("test over, delete every data
#      structure"), left uncommented in the transcription, is a comment.
# Everything else, typos ('A titile', `outoff`) included, is as transcribed.
#
# CAUTION: the test's own cleanup deletes every time:*, voted:*, score:*,
# articles:* and group:* key of the database it runs in (and leaves the
# article:* hashes and the article: counter), so give it a database of its
# own (BOOK_REDIS_DB) rather than one votegraph's data is in.

import os, sys
_book_python = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'target', 'book-python')
if os.path.isdir(_book_python):
    sys.path.insert(0, os.path.normpath(_book_python))

import time

# 截止时间,一周
ONE_WEEK_IN_SECONDS = 7 * (24 * 60 * 60)
# 计分常量
VOTE_SCORE = 432

"""
发布文章

@param {object}
@param {string} 用户
@param {string} 文章title
@param

@return {string} 文章id
"""
def postArticle(conn, user, title, link):
    # 创建一个新的文章ID
    article_id = str(conn.incr('article:'))

    # 将文章发布者ID添加到记录文章已投票用户名单的集合中,并用EXPIRE为这个集合设置过期时间
    voted = 'voted:' + article_id
    conn.sadd(voted, user)
    conn.expire(voted, ONE_WEEK_IN_SECONDS)
    
    now = time.time()
    
    # 用HMSET存储文章的相关信息
    article = 'article:' + article_id
    conn.hmset(article, {
        'title': title,
        'link': link,
        'poster': user,
        'time': now,
        'votes': 1
    })
    
    # 执行两个ZADD,将文章的初始评分与发布时间添加到两个相应的有序集合中
    conn.zadd('time:', article, now)
    conn.zadd('score:', article, now + VOTE_SCORE)
    
    return article_id

"""
用户投票功能

@param {object}
@param {string} 用户
@param {string} 文章

"""
def voteArticle(conn, user, article):
    # 判断文章是否超过了投票截止时间,如果超过,则不允许投票
    outoff = time.time() - ONE_WEEK_IN_SECONDS
    if conn.zscore('time:', article) < outoff:
        return
    
    article_id = article.partition(':')[-1]
    # 将用户添加到记录已投票用户名单的集合中
    if conn.sadd('voted:' + article_id, user):
        # 增加该文章的评分和投票数量
        conn.zincrby('score:', article, VOTE_SCORE)
        conn.hincrby(article, 'votes', 1)

"""
取出评分最高的文章,或者最新发布的文章

@param {object}
@param {int}    页码
@param {string} 有序集合名称,可以是score:,time:

@return array
"""
# 每页的文章数
ARTICLES_PER_PAGE = 25

def getArticles(conn, page, order = 'score:'):
    # 获取指定页码文章的起始索引和结束索引
    start = (page - 1) * ARTICLES_PER_PAGE
    end   = start + ARTICLES_PER_PAGE - 1

    # 取出指定位置的文章id
    article_ids = conn.zrevrange(order, start, end)

    articles = []
    for id in article_ids:
        article_data = conn.hgetall(id)
        article_data['id'] = id

        articles.append(article_data)

    return articles

"""
添加移除文章到指定的群组中

@param {object}
@param {int}   文章ID
@param {array} 添加的群组
@param {array} 移除的群组

"""
def addRemoveGroups(conn, article_id, to_add = [], to_remove = []):
    article = 'article:' + article_id
    
    # 添加文章到群组中
    for group in to_add:
        conn.sadd('group:' + group, article)
    
    # 从群组中移除文章
    for group in to_remove:
        conn.srem('group:' + group, article)

"""
根据评分或者发布时间对群组文章进行排序和分页

@param {object}
@param {int}   文章ID
@param {array} 添加的群组
@param {array} 移除的群组

"""
def getGroupArticles(conn, group, page, order = 'score:'):
    # 群组有序集合名
    key = order + group

    if not conn.exists(key):
        conn.zinterstore(key, ['group:' + group, order], aggregate = 'max')
        conn.expire(key, 60)

    return getArticles(conn, page, key)

import unittest
class TestArticle(unittest.TestCase):
    """
    初始化redis连接
    """
    def setUp(self):
        import redis
        self.conn = redis.Redis(unix_socket_path=os.environ['BOOK_REDIS_SOCKET'], db=int(os.environ.get('BOOK_REDIS_DB', '0')), decode_responses=True)

    """
    删除redis连接
    """
    def tearDown(self):
        del self.conn
        print()
        print()

    """
    测试文章的投票过程
    """
    def testArticleFunctionality(self):
        conn = self.conn
        import pprint

        # 发布文章
        article_id = str(postArticle(conn, 'username', 'A titile', 'http://www.baidu.com'))
        print("我发布了一篇文章,id为:", article_id)
        print()
        self.assertTrue(article_id)
        
        article = 'article:' + article_id
        # 显示文章保存的散列格式
        print("文章保存的散列格式如下:")
        article_hash = conn.hgetall(article)
        print(article_hash)
        print()
        self.assertTrue(article)

        # 为文章投票
        voteArticle(conn, 'other_user', article)
        print('我们为该文章投票,目前该文章的票数:')
        votes = int(conn.hget(article, 'votes'))
        print(votes)
        print()
        self.assertTrue(votes > 1)

        print('当前得分最高的文章是:')
        articles = getArticles(conn, 1)
        pprint.pprint(articles)
        print()
        self.assertTrue(len(articles) >= 1)

        # 将文章推入到群组
        addRemoveGroups(conn, article_id, ['new-group'])
        print("我们将文章推到新的群组,其他文章包括:")
        articles = getGroupArticles(conn, 'new-group', 1)
        pprint.pprint(articles)
        print()
        self.assertTrue(len(articles) >= 1)

        # 测试结束,删除所有的数据结构
        to_del = (
            conn.keys('time:*') + conn.keys('voted:*') + conn.keys('score:*') + 
            conn.keys('articles:*') + conn.keys('group:*')
        )

        if to_del:
            conn.delete(*to_del)

if __name__ == '__main__':
    unittest.main()
