#!/usr/bin/env python3
"""Runs one function of Redis in Action's chapter 1 (tests/book/ch01.py, the
book's code) against a Redis reached by unix socket, for votegraph's tests.

    python3 tests/book/book.py --socket PATH [--db N] COMMAND ARGS...

Commands (each calls exactly one ch01.py function and prints its return
value as one line of JSON):

    post USER TITLE LINK              post_article        -> the id, e.g. "3"
    post-at UNIX_TIME USER TITLE LINK post_article, with time.time() answering
                                      UNIX_TIME (an old article, as an import
                                      of old data writes it) -> the id
    vote USER ARTICLE                 article_vote        -> null
    downvote USER ARTICLE             article_downvote    -> null
    switch USER ARTICLE               switch_vote         -> null
    groups ID [--add G...] [--remove G...]
                                      add_remove_groups   -> null
    articles PAGE [ORDER]             get_articles        -> list of hashes
    group-articles GROUP PAGE [ORDER] get_group_articles  -> list of hashes
    batch                             reads one command per line from stdin
                                      as a JSON array, e.g.
                                      ["vote", "user:bob", "article:3"],
                                      and prints one JSON line per command

ARTICLE is the book's `article:<id>`, ID the bare id, ORDER a sorted set
(`score:` by default, or `time:`). Any error (a bad command, a Redis error,
the book's code failing, e.g. on an article that does not exist) exits
non-zero (2 for a bad command line, 1 otherwise) with a message on stderr;
in batch mode the lines before the failing one have been answered.

ch01.py is imported from this script's folder. redis-py 2.x is needed (the
book's code uses its signatures): scripts/ensure-book-python.sh installs it
into target/book-python, which is put first on sys.path when it exists
(BOOK_PYTHON_DIR names another folder), so PYTHONPATH is optional.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BOOK_PYTHON = os.environ.get('BOOK_PYTHON_DIR') or os.path.join(
    HERE, '..', '..', 'target', 'book-python')
if os.path.isdir(BOOK_PYTHON):
    sys.path.insert(0, os.path.normpath(BOOK_PYTHON))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

try:
    import redis
except ImportError:
    sys.stderr.write('book.py: redis-py is not installed: run scripts/ensure-book-python.sh\n')
    sys.exit(1)
if not redis.__version__.startswith('2.'):
    sys.stderr.write('book.py: the book\'s code needs redis-py 2.x, found %s at %s: '
                     'run scripts/ensure-book-python.sh\n' % (redis.__version__, redis.__file__))
    sys.exit(1)
import ch01  # noqa: E402

USAGE = ('usage: book.py --socket PATH [--db N] '
         '(post USER TITLE LINK | post-at UNIX_TIME USER TITLE LINK | '
         'vote USER ARTICLE | downvote USER ARTICLE | switch USER ARTICLE | '
         'groups ID [--add G...] [--remove G...] | articles PAGE [ORDER] | '
         'group-articles GROUP PAGE [ORDER] | batch)')


class UsageError(Exception):
    pass


class CommandError(Exception):
    pass


class FrozenTime(object):
    """Stands in for the `time` module in ch01: time() answers a fixed
    moment, everything else is the real module's."""

    def __init__(self, at):
        self.at = at

    def time(self):
        return self.at

    def __getattr__(self, name):
        return getattr(ch01_time, name)


ch01_time = ch01.time


def post_at(conn, at, user, title, link):
    ch01.time = FrozenTime(at)
    try:
        return ch01.post_article(conn, user, title, link)
    finally:
        ch01.time = ch01_time


def number(text, kind, what):
    try:
        return kind(text)
    except ValueError:
        raise UsageError('%s must be a number, not %r' % (what, text))


def arity(command, args, least, most=None):
    most = least if most is None else most
    if not least <= len(args) <= most:
        raise UsageError('%s takes %s argument(s), got %d: %r' % (
            command, least if least == most else '%d-%d' % (least, most),
            len(args), args))


def groups_args(args):
    if not args:
        raise UsageError('groups needs an article id')
    article_id, to_add, to_remove, into = args[0], [], [], None
    for arg in args[1:]:
        if arg == '--add':
            into = to_add
        elif arg == '--remove':
            into = to_remove
        elif into is None:
            raise UsageError('groups: %r is neither after --add nor after --remove' % arg)
        else:
            into.append(arg)
    return article_id, to_add, to_remove


def run(conn, argv):
    """Runs one command (a list of strings) and returns its result."""
    if not argv:
        raise UsageError('no command')
    command, args = argv[0], argv[1:]
    if command == 'post':
        arity(command, args, 3)
        return ch01.post_article(conn, *args)
    if command == 'post-at':
        arity(command, args, 4)
        at = number(args[0], float, 'UNIX_TIME')
        return post_at(conn, at, *args[1:])
    if command == 'vote':
        arity(command, args, 2)
        return ch01.article_vote(conn, *args)
    if command == 'downvote':
        arity(command, args, 2)
        return ch01.article_downvote(conn, *args)
    if command == 'switch':
        arity(command, args, 2)
        return ch01.switch_vote(conn, *args)
    if command == 'groups':
        article_id, to_add, to_remove = groups_args(args)
        return ch01.add_remove_groups(conn, article_id, to_add, to_remove)
    if command == 'articles':
        arity(command, args, 1, 2)
        page = number(args[0], int, 'PAGE')
        return ch01.get_articles(conn, page, *args[1:])
    if command == 'group-articles':
        arity(command, args, 2, 3)
        page = number(args[1], int, 'PAGE')
        return ch01.get_group_articles(conn, args[0], page, *args[2:])
    raise UsageError('unknown command %r' % command)


def batch(conn):
    for n, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        try:
            argv = json.loads(line)
        except ValueError as e:
            raise UsageError('batch line %d is not JSON: %s' % (n, e))
        if not isinstance(argv, list):
            raise UsageError('batch line %d is not a JSON array' % n)
        # Numbers may be written as JSON numbers: ["articles", 1].
        argv = [a if isinstance(a, str) else json.dumps(a) for a in argv]
        if argv and argv[0] == 'batch':
            raise UsageError('batch line %d: batch does not nest' % n)
        try:
            result = run(conn, argv)
        except UsageError:
            raise
        except Exception as e:
            raise CommandError('batch line %d %s: %s: %s' % (
                n, json.dumps(argv), type(e).__name__, e))
        sys.stdout.write(json.dumps(result) + '\n')
        sys.stdout.flush()


def main(argv):
    socket_path, db = None, 0
    while argv and argv[0] in ('--socket', '--db'):
        if len(argv) < 2:
            raise UsageError('%s needs a value' % argv[0])
        if argv[0] == '--socket':
            socket_path = argv[1]
        else:
            db = number(argv[1], int, '--db')
        argv = argv[2:]
    if socket_path is None:
        raise UsageError('--socket PATH is required')
    conn = redis.Redis(unix_socket_path=socket_path, db=db, decode_responses=True)
    if argv == ['batch']:
        batch(conn)
        return
    result = run(conn, argv)
    sys.stdout.write(json.dumps(result) + '\n')


if __name__ == '__main__':
    try:
        main(sys.argv[1:])
    except UsageError as e:
        sys.stderr.write('book.py: %s\n%s\n' % (e, USAGE))
        sys.exit(2)
    except CommandError as e:
        sys.stderr.write('book.py: %s\n' % e)
        sys.exit(1)
    except Exception as e:
        sys.stderr.write('book.py: %s: %s\n' % (type(e).__name__, e))
        sys.exit(1)
