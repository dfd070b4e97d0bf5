//! A model-based test of roles, bans and login tokens: random runs of
//! `signUp`, `logIn`, `logOut`, `banUser` (for good, or for a second or
//! two), `unbanUser` and `setRole` (each through either of two instances,
//! sometimes over a WebSocket) and `votegraph set-role`, with every token
//! probed after each step (`me`, `setRole`, `removeArticle`) and each
//! answer compared with a small model: a request acts with its user's
//! role and ban as they are now, and a ban ends the user's tokens for good
//! (docs/api.md, Moderation).
//!
//! - Each case starts its own Redis and two servers, so no case sees
//!   another's users or admins.
//! - The proptest reference state plans the run: the model on a logical
//!   clock, where a timed ban lasts until the next `Wait`. The judge is the
//!   same model on the wall clock, beside the servers: a request that ran
//!   within [`MARGIN`] of a ban's end may find it either way, and its
//!   answer settles which. `Wait` sleeps past every timed ban's end.
//! - `VOTEGRAPH_MODEL_SECS` (default 180) bounds the run: cases start until
//!   it is spent; the steps run are printed at the end (`--nocapture`).
//! - A failure is shrunk (for at most `VOTEGRAPH_MODEL_SHRINK_SECS`,
//!   default 120) and names its seed; `VOTEGRAPH_MODEL_SEED=<seed>
//!   VOTEGRAPH_MODEL_SECS=0` replays that case first. Sequences worth
//!   keeping are fixed tests at the end, not proptest's seed files, which
//!   a change of the strategies would silently void.

use std::cell::Cell;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::Union;
use proptest::test_runner::{Config, RngSeed, TestError, TestRunner};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest};
use serde_json::{json, Value};
use tokio::runtime::Runtime;
use votegraph::config::{RateLimit, Settings};

use crate::helpers::{
    gql_at, now, set_role_cli, spawn_app_with, spawn_server, test_settings, Instance, Seen,
    TestApp, WsClient, TRANSPORT_WS,
};

/// The users of a run. The first is made an admin with the command line
/// before the run; the others sign up during it.
const NAMES: [&str; 4] = ["root", "ann", "bob", "cyd"];

/// Transitions per case, at most.
const MAX_STEPS: usize = 40;

/// How close to a ban's end (seconds) a request may find it either way:
/// the servers read the same clock, in whole seconds.
const MARGIN: f64 = 0.25;

/// The logical time a `Wait` moves the plan on: past any timed ban.
const WAIT_TICKS: u64 = 100;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Role {
    #[default]
    Member,
    Moderator,
    Admin,
}

impl Role {
    fn api(self) -> &'static str {
        match self {
            Role::Member => "MEMBER",
            Role::Moderator => "MODERATOR",
            Role::Admin => "ADMIN",
        }
    }

    fn parse(api: &str) -> Option<Self> {
        [Role::Member, Role::Moderator, Role::Admin]
            .into_iter()
            .find(|role| role.api() == api)
    }
}

/// A ban as the account keeps it: a timed one stays, ended, until an unban.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ban {
    Forever,
    /// Until this Unix second (logical in the plan).
    Until(u64),
}

/// When a request ran: a logical time (the plan) or a window of wall-clock
/// Unix seconds (the judge).
#[derive(Clone, Copy, Debug)]
enum When {
    Logical(u64),
    Between(f64, f64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Banned {
    Yes,
    No,
    Maybe,
}

impl Banned {
    /// The states a request may have found.
    fn resolutions(self) -> &'static [bool] {
        match self {
            Banned::Yes => &[true],
            Banned::No => &[false],
            Banned::Maybe => &[true, false],
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Account {
    role: Role,
    ban: Option<Ban>,
}

/// A token handed out (`live` until logged out), or a `signUp` or `logIn`
/// that handed none (never live), so slots line up in plan and judge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Token {
    user: usize,
    live: bool,
    /// Started before a ban of its user, which ended it for good.
    ended: bool,
}

#[derive(Clone, Debug)]
struct Model {
    /// By index into [`NAMES`]; None until signed up.
    accounts: [Option<Account>; 4],
    tokens: Vec<Token>,
    /// The plan's logical clock.
    clock: u64,
}

/// One of [`NAMES`], by index; shown by name.
#[derive(Clone, Copy, PartialEq, Eq)]
struct User(usize);

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(NAMES[self.0])
    }
}

/// The `nth` token a user was handed (counted modulo how many; failed
/// attempts count too), shown as `ann#1`; none before their first. Steps
/// name tokens by user, so a shrink that drops another user's step leaves
/// them naming the same token.
#[derive(Clone, Copy)]
struct TokenOf {
    user: usize,
    nth: usize,
}

impl std::fmt::Debug for TokenOf {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}#{}", NAMES[self.user], self.nth)
    }
}

/// Which server a request goes to, and whether over a WebSocket; shown as
/// `http@0` or `ws@1`.
#[derive(Clone, Copy)]
struct Via {
    instance: usize,
    ws: bool,
}

impl std::fmt::Debug for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let transport = if self.ws { "ws" } else { "http" };
        write!(f, "{transport}@{}", self.instance)
    }
}

/// One transition.
#[derive(Clone, Copy, Debug)]
enum Step {
    SignUp {
        user: User,
        via: Via,
    },
    LogIn {
        user: User,
        via: Via,
    },
    /// Over HTTP: a socket's own `logOut` may close it before it answers.
    LogOut {
        token: TokenOf,
        instance: usize,
    },
    Ban {
        actor: TokenOf,
        target: User,
        secs: Option<u64>,
        via: Via,
    },
    Unban {
        actor: TokenOf,
        target: User,
        via: Via,
    },
    SetRole {
        actor: TokenOf,
        target: User,
        role: Role,
        via: Via,
    },
    SetRoleCli {
        target: User,
        role: Role,
    },
    /// Sleeps past every timed ban's end.
    Wait,
}

/// What a step answered.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Token,
    LoggedOut(bool),
    /// The `logOut` of a token a ban ended: the docs do not say whether
    /// it answers that it revoked a session.
    LoggedOutEnded,
    /// A moderation's answer: the user, with this role.
    User(Role),
    Cli {
        changed: bool,
    },
    CliNoUser,
    Code(String),
    /// A WebSocket closed with 4403 at `connection_init`.
    Refused,
    /// A wait answers nothing.
    Waited,
}

impl Outcome {
    /// Whether `seen` is this answer; a socket refused at the start stands
    /// for a token that is no one's or banned.
    fn admits(&self, seen: &Outcome) -> bool {
        self == seen
            || (*seen == Outcome::Refused
                && matches!(self, Outcome::Code(c) if c == "UNAUTHENTICATED" || c == "BANNED"))
            || (*self == Outcome::LoggedOutEnded && matches!(seen, Outcome::LoggedOut(_)))
    }
}

fn code(code: &str) -> Outcome {
    Outcome::Code(code.to_owned())
}

/// What a token's probes answer: `me`, and the error codes of `setRole` on
/// a user that does not exist and of `removeArticle` on the removed
/// fixture (None: it answered data).
#[derive(Clone, PartialEq, Eq)]
struct Probed {
    me: Value,
    set_role: Option<String>,
    remove: Option<String>,
}

impl std::fmt::Debug for Probed {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let answer = |code: &Option<String>| code.clone().unwrap_or_else(|| "data".to_owned());
        let (set_role, remove) = (answer(&self.set_role), answer(&self.remove));
        write!(
            f,
            "{{me: {}, setRole: {set_role}, removeArticle: {remove}}}",
            self.me
        )
    }
}

/// What a moderation does to its target.
#[derive(Clone, Copy, Debug)]
enum Action {
    Ban(Ban),
    Unban,
    SetRole(Role),
}

impl Model {
    /// The first admin, made with the command line, with one token.
    fn bootstrap() -> Self {
        let root = Account {
            role: Role::Admin,
            ban: None,
        };
        Self {
            accounts: [Some(root), None, None, None],
            tokens: vec![Token {
                user: 0,
                live: true,
                ended: false,
            }],
            clock: 0,
        }
    }

    fn role(&self, user: usize) -> Role {
        self.accounts[user]
            .as_ref()
            .map_or(Role::Member, |a| a.role)
    }

    fn banned(&self, user: usize, when: When) -> Banned {
        let Some(ban) = self.accounts[user].as_ref().and_then(|a| a.ban) else {
            return Banned::No;
        };
        let (end, from, to) = match (ban, when) {
            (Ban::Forever, _) => return Banned::Yes,
            (Ban::Until(end), When::Logical(now)) => (end as f64, now as f64, now as f64),
            (Ban::Until(end), When::Between(from, to)) => (end as f64, from - MARGIN, to + MARGIN),
        };
        if to < end {
            Banned::Yes
        } else if from >= end {
            Banned::No
        } else {
            Banned::Maybe
        }
    }

    /// Whether some timed ban has not ended on the plan's clock.
    fn timed_ban_running(&self) -> bool {
        let running = |a: &Account| matches!(a.ban, Some(Ban::Until(end)) if end > self.clock);
        self.accounts.iter().flatten().any(running)
    }

    fn is_last_admin(&self, user: usize) -> bool {
        let admins = (0..NAMES.len()).filter(|&u| self.role(u) == Role::Admin);
        self.role(user) == Role::Admin && admins.count() <= 1
    }

    /// The slot `token` names, if its user was handed any.
    fn slot(&self, token: TokenOf) -> Option<usize> {
        let slots: Vec<usize> = (0..self.tokens.len())
            .filter(|&i| self.tokens[i].user == token.user)
            .collect();
        (!slots.is_empty()).then(|| slots[token.nth % slots.len()])
    }

    /// How steps name the token in `slot`.
    fn name_of(&self, slot: usize) -> TokenOf {
        let user = self.tokens[slot].user;
        let nth = self.tokens[..slot]
            .iter()
            .filter(|t| t.user == user)
            .count();
        TokenOf { user, nth }
    }

    /// The newest live token of `user`.
    fn newest_token(&self, user: usize) -> Option<usize> {
        let tokens = self.tokens.iter().enumerate().rev();
        tokens
            .filter(|(_, t)| t.user == user && t.live)
            .map(|(i, _)| i)
            .next()
    }

    /// The user whose ban decides a step's answer: the actor's, or the one
    /// logging in.
    fn decided_by(&self, step: &Step) -> Option<usize> {
        match *step {
            Step::LogIn { user, .. } => Some(user.0),
            Step::Ban { actor, .. } | Step::Unban { actor, .. } | Step::SetRole { actor, .. } => {
                let token = self.tokens[self.slot(actor)?];
                token.live.then_some(token.user)
            }
            _ => None,
        }
    }

    /// Applies `step` (a ban ending at `end`), its deciding user `banned`
    /// or not, and says what it answers.
    fn step(&mut self, step: &Step, end: Ban, banned: bool) -> Outcome {
        match *step {
            Step::SignUp {
                user: User(user), ..
            } => {
                let taken = self.accounts[user].is_some();
                if !taken {
                    self.accounts[user] = Some(Account::default());
                }
                self.tokens.push(Token {
                    user,
                    live: !taken,
                    ended: false,
                });
                match taken {
                    true => code("BAD_USER_INPUT"),
                    false => Outcome::Token,
                }
            }
            Step::LogIn {
                user: User(user), ..
            } => {
                let answer = match self.accounts[user] {
                    None => code("UNAUTHENTICATED"),
                    Some(_) if banned => code("BANNED"),
                    Some(_) => Outcome::Token,
                };
                let live = answer == Outcome::Token;
                self.tokens.push(Token {
                    user,
                    live,
                    ended: false,
                });
                answer
            }
            Step::LogOut { token, .. } => match self.slot(token) {
                Some(i) if self.tokens[i].ended => {
                    self.tokens[i].live = false;
                    Outcome::LoggedOutEnded
                }
                Some(i) => Outcome::LoggedOut(std::mem::replace(&mut self.tokens[i].live, false)),
                None => Outcome::LoggedOut(false),
            },
            Step::Ban { actor, target, .. } => {
                self.moderate(actor, target.0, banned, Action::Ban(end))
            }
            Step::Unban { actor, target, .. } => {
                self.moderate(actor, target.0, banned, Action::Unban)
            }
            Step::SetRole {
                actor,
                target,
                role,
                ..
            } => self.moderate(actor, target.0, banned, Action::SetRole(role)),
            Step::SetRoleCli { target, role } => match &mut self.accounts[target.0] {
                None => Outcome::CliNoUser,
                Some(account) => Outcome::Cli {
                    changed: std::mem::replace(&mut account.role, role) != role,
                },
            },
            Step::Wait => {
                self.clock += WAIT_TICKS;
                Outcome::Waited
            }
        }
    }

    /// A ban, unban or role change through the API, as the rules say:
    /// moderators ban members, admins anyone; no one bans themselves; the
    /// last admin is neither banned nor demoted; what is already so
    /// answers without a change. A ban ends the target's tokens.
    fn moderate(&mut self, actor: TokenOf, target: usize, banned: bool, action: Action) -> Outcome {
        let Some(token) = self.slot(actor).map(|i| self.tokens[i]).filter(|t| t.live) else {
            return code("UNAUTHENTICATED");
        };
        if banned {
            return code("BANNED");
        }
        if token.ended {
            return code("UNAUTHENTICATED");
        }
        let role = self.role(token.user);
        let allowed = match action {
            Action::SetRole(_) => role == Role::Admin,
            _ => role != Role::Member,
        };
        if !allowed {
            return code("FORBIDDEN");
        }
        let last_admin = self.is_last_admin(target);
        let Some(account) = self.accounts[target].as_mut() else {
            return code("NOT_FOUND");
        };
        let refused = match action {
            Action::SetRole(new) => account.role != new && last_admin,
            Action::Ban(_) | Action::Unban => {
                target == token.user
                    || (account.role != Role::Member && role != Role::Admin)
                    || (matches!(action, Action::Ban(_)) && last_admin)
            }
        };
        if refused {
            return code("FORBIDDEN");
        }
        let ends_tokens = matches!(action, Action::Ban(end) if account.ban != Some(end));
        match action {
            Action::SetRole(new) => account.role = new,
            Action::Ban(end) => account.ban = Some(end),
            Action::Unban => account.ban = None,
        }
        let role = account.role;
        if ends_tokens {
            let tokens = self.tokens.iter_mut().filter(|t| t.user == target);
            tokens.for_each(|t| t.ended = true);
        }
        Outcome::User(role)
    }

    /// What token `index`'s probes answer, its user `banned` or not.
    fn probed(&self, index: usize, banned: bool) -> Probed {
        let Token { user, live, ended } = self.tokens[index];
        let refused = |code: &str| Probed {
            me: Value::Null,
            set_role: Some(code.to_owned()),
            remove: Some(code.to_owned()),
        };
        if !live {
            return refused("UNAUTHENTICATED");
        }
        if banned {
            return refused("BANNED");
        }
        if ended {
            return refused("UNAUTHENTICATED");
        }
        let role = self.role(user);
        let set_role = match role {
            Role::Admin => "NOT_FOUND",
            _ => "FORBIDDEN",
        };
        Probed {
            me: json!({ "name": NAMES[user], "role": role.api() }),
            set_role: Some(set_role.to_owned()),
            remove: (role == Role::Member).then(|| "FORBIDDEN".to_owned()),
        }
    }
}

/// Plans runs: the model on its logical clock.
struct Plan;

impl ReferenceStateMachine for Plan {
    type State = Model;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::bootstrap()).boxed()
    }

    fn transitions(model: &Model) -> BoxedStrategy<Step> {
        steps(model)
    }

    fn apply(mut model: Model, step: &Step) -> Model {
        let end = match *step {
            Step::Ban { secs: Some(s), .. } => Ban::Until(model.clock + s),
            _ => Ban::Forever,
        };
        let when = When::Logical(model.clock);
        let banned = model.decided_by(step).map(|u| model.banned(u, when));
        model.step(step, end, banned == Some(Banned::Yes));
        model
    }
}

/// Mostly one of `preferred`, sometimes anything `any` makes.
fn mostly<T>(preferred: Vec<T>, any: BoxedStrategy<T>) -> BoxedStrategy<T>
where
    T: Clone + std::fmt::Debug + 'static,
{
    match preferred.is_empty() {
        true => any,
        false => prop_oneof![4 => select(preferred), 1 => any].boxed(),
    }
}

/// The live tokens, as steps name them.
fn live_tokens(model: &Model) -> Vec<TokenOf> {
    let of = |user| model.tokens.iter().filter(move |t| t.user == user);
    let live = |user| of(user).enumerate().filter(|(_, t)| t.live);
    let tokens = (0..NAMES.len()).map(|user| live(user).map(move |(nth, _)| TokenOf { user, nth }));
    tokens.flatten().collect()
}

/// The next step: mostly by live tokens, on users who exist (sign-ups
/// mostly of new ones), and a `Wait` only while a timed ban runs.
fn steps(model: &Model) -> BoxedStrategy<Step> {
    let any_user = (0..NAMES.len()).prop_map(User).boxed();
    let (known, new): (Vec<User>, Vec<User>) = (0..NAMES.len())
        .map(User)
        .partition(|u| model.accounts[u.0].is_some());
    let any_token = (0..NAMES.len(), 0..4usize).prop_map(|(user, nth)| TokenOf { user, nth });
    let token = mostly(live_tokens(model), any_token.boxed());
    let target = mostly(known, any_user.clone());
    let via =
        (0..2usize, prop::bool::weighted(0.25)).prop_map(|(instance, ws)| Via { instance, ws });
    let role = select(vec![Role::Member, Role::Moderator, Role::Admin]);
    let secs = prop::option::weighted(0.6, 1..=2u64);
    let sign_up = (mostly(new, any_user), via.clone());
    let log_in = (target.clone(), via.clone());
    let log_out = (token.clone(), 0..2usize);
    let ban = (token.clone(), target.clone(), secs, via.clone());
    let unban = (token.clone(), target.clone(), via.clone());
    let set_role = (token, target.clone(), role.clone(), via);
    let mut choices = vec![
        (
            2,
            sign_up
                .prop_map(|(user, via)| Step::SignUp { user, via })
                .boxed(),
        ),
        (
            3,
            log_in
                .prop_map(|(user, via)| Step::LogIn { user, via })
                .boxed(),
        ),
        (
            1,
            log_out
                .prop_map(|(token, instance)| Step::LogOut { token, instance })
                .boxed(),
        ),
        (
            3,
            ban.prop_map(|(actor, target, secs, via)| Step::Ban {
                actor,
                target,
                secs,
                via,
            })
            .boxed(),
        ),
        (
            2,
            unban
                .prop_map(|(actor, target, via)| Step::Unban { actor, target, via })
                .boxed(),
        ),
        (
            4,
            set_role
                .prop_map(|(actor, target, role, via)| Step::SetRole {
                    actor,
                    target,
                    role,
                    via,
                })
                .boxed(),
        ),
        (
            2,
            (target, role)
                .prop_map(|(target, role)| Step::SetRoleCli { target, role })
                .boxed(),
        ),
    ];
    if model.timed_ban_running() {
        choices.push((3, Just(Step::Wait).boxed()));
    }
    Union::new_weighted(choices).boxed()
}

const SIGN_UP: &str =
    "mutation($n: String!, $p: String!) { signUp(name: $n, password: $p) { token } }";
const LOG_IN: &str =
    "mutation($n: String!, $p: String!) { logIn(name: $n, password: $p) { token } }";
const LOG_OUT: &str = "mutation { logOut }";
const BAN: &str = "mutation($n: String!, $u: DateTime) { \
                   banUser(name: $n, reason: \"model\", until: $u) { role } }";
const UNBAN: &str = "mutation($n: String!) { unbanUser(name: $n) { role } }";
const SET_ROLE: &str = "mutation($n: String!, $r: Role!) { setRole(name: $n, role: $r) { role } }";
const ME: &str = "{ me { name role } }";
/// Admins get `NOT_FOUND`, which changes nothing.
const SET_ROLE_OF_NOBODY: &str = "mutation { setRole(name: \"nobody\", role: MEMBER) { role } }";
/// On the removed fixture: moderators find it already so, which changes
/// nothing.
const REMOVE: &str =
    "mutation($id: ID!) { removeArticle(articleId: $id, reason: \"probe\") { id } }";

thread_local! {
    /// Steps applied on this thread, for the closing count.
    static STEPS: Cell<usize> = const { Cell::new(0) };
}

/// Lifts the limits a run would hit: logins per name, moderations per
/// hour, sockets per address.
fn lift_limits(settings: &mut Settings) {
    let generous: RateLimit = "1000000/60".parse().expect("a rate limit");
    settings.rate_moderation = generous;
    settings.login_attempts = 1_000_000;
    settings.ws_max_connections_per_client = 1_000;
}

fn password(user: usize) -> String {
    format!("password-of-{}", NAMES[user])
}

/// A Unix second as a GraphQL `DateTime`.
fn rfc3339(secs: u64) -> String {
    let at = chrono::DateTime::from_timestamp(secs as i64, 0).expect("a time");
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The code of a body's first error; None when it has none.
fn error_of(body: &Value) -> Option<String> {
    match &body["errors"][0] {
        Value::Null => None,
        error => Some(
            error["extensions"]["code"]
                .as_str()
                .unwrap_or_else(|| panic!("an error without a code: {body}"))
                .to_owned(),
        ),
    }
}

/// What a step's reply (None: a socket refused) says.
fn read(field: &str, reply: &Option<Value>) -> Outcome {
    let Some(body) = reply else {
        return Outcome::Refused;
    };
    if let Some(code) = error_of(body) {
        return Outcome::Code(code);
    }
    let data = &body["data"][field];
    match field {
        "signUp" | "logIn" => {
            assert!(data["token"].is_string(), "{body}");
            Outcome::Token
        }
        "logOut" => Outcome::LoggedOut(data.as_bool().unwrap_or_else(|| panic!("{body}"))),
        _ => {
            let role = data["role"].as_str().and_then(Role::parse);
            Outcome::User(role.unwrap_or_else(|| panic!("no role: {body}")))
        }
    }
}

/// A socket on `address`, logged in with `token` (anonymous without);
/// None when `connection_init` is refused with 4403.
async fn open_socket(address: &str, token: Option<&str>) -> Option<WsClient> {
    let mut socket = WsClient::open(address, TRANSPORT_WS).await;
    let payload = token.map_or(
        json!({}),
        |t| json!({ "Authorization": format!("Bearer {t}") }),
    );
    socket
        .send(json!({ "type": "connection_init", "payload": payload }))
        .await;
    match socket.next().await {
        Seen::Msg(ack) if ack == json!({ "type": "connection_ack" }) => Some(socket),
        Seen::Closed(4403, _) => None,
        other => panic!("connection_init answered {other:?}"),
    }
}

/// One request of a step.
struct Request {
    via: Via,
    token: Option<String>,
    query: &'static str,
    variables: Value,
    /// The mutation's field in the answer.
    field: &'static str,
}

/// One Redis and two servers on it, and what the run has seen.
struct Servers {
    run: Run,
    /// Last, so the servers are dropped before their runtime.
    runtime: Runtime,
}

struct Run {
    app: TestApp,
    other: Instance,
    /// Each slot's token, or a made-up one for a slot that got none.
    tokens: Vec<String>,
    /// The removed article the probes remove again.
    fixture: String,
    /// The judge: the model on the wall clock.
    model: Model,
    /// Steps applied so far in this case.
    steps: usize,
}

impl Run {
    /// Two servers, `root` made an admin on the command line (`root#0`
    /// its token), and the fixture posted and removed.
    async fn start() -> Self {
        let app = spawn_app_with(lift_limits).await;
        let mut settings = test_settings(&app.redis);
        lift_limits(&mut settings);
        let other = spawn_server(settings).await;
        let root = app.sign_up(NAMES[0]).await;
        let out = set_role_cli(&app.redis.url(), NAMES[0], "admin");
        assert!(out.status.success(), "{out:?}");
        let article = app.post(&root, "the fixture", &[]).await;
        let fixture = article["id"].as_str().expect("an id").to_owned();
        app.gql_ok(REMOVE, json!({ "id": fixture }), Some(&root))
            .await;
        Self {
            app,
            other,
            tokens: vec![root],
            fixture,
            model: Model::bootstrap(),
            steps: 0,
        }
    }

    fn address(&self, instance: usize) -> &str {
        match instance {
            0 => &self.app.address,
            _ => &self.other.address,
        }
    }

    /// Sends `step` (a ban ending at `end`), judges its answer and, for a
    /// step that ends a token, watches a socket of it close.
    async fn act(&mut self, step: &Step) {
        let end = match *step {
            Step::Ban { secs: Some(s), .. } => Ban::Until(now().ceil() as u64 + s),
            _ => Ban::Forever,
        };
        let watched = self.watch(step).await;
        let from = now();
        let request = self.request(step, end);
        let reply = self.send(&request).await;
        if matches!(step, Step::SignUp { .. } | Step::LogIn { .. }) {
            let token = reply
                .as_ref()
                .and_then(|b| b["data"][request.field]["token"].as_str());
            let made_up = format!("no-token-{}", self.tokens.len());
            self.tokens.push(token.map_or(made_up, str::to_owned));
        }
        let seen = read(request.field, &reply);
        self.judge(step, end, &seen, When::Between(from, now()));
        if let Some(watched) = watched {
            self.closes(step, watched).await;
        }
    }

    fn request(&self, step: &Step, end: Ban) -> Request {
        let credentials = |User(user)| json!({ "n": NAMES[user], "p": password(user) });
        let token = |who| self.model.slot(who).map(|i| self.tokens[i].clone());
        let (via, token, query, variables, field) = match *step {
            Step::SignUp { user, via } => (via, None, SIGN_UP, credentials(user), "signUp"),
            Step::LogIn { user, via } => (via, None, LOG_IN, credentials(user), "logIn"),
            Step::LogOut { token: t, instance } => {
                let via = Via {
                    instance,
                    ws: false,
                };
                (via, token(t), LOG_OUT, json!({}), "logOut")
            }
            Step::Ban {
                actor, target, via, ..
            } => {
                let until = match end {
                    Ban::Until(secs) => json!(rfc3339(secs)),
                    Ban::Forever => Value::Null,
                };
                let variables = json!({ "n": NAMES[target.0], "u": until });
                (via, token(actor), BAN, variables, "banUser")
            }
            Step::Unban { actor, target, via } => {
                let variables = json!({ "n": NAMES[target.0] });
                (via, token(actor), UNBAN, variables, "unbanUser")
            }
            Step::SetRole {
                actor,
                target,
                role,
                via,
            } => {
                let variables = json!({ "n": NAMES[target.0], "r": role.api() });
                (via, token(actor), SET_ROLE, variables, "setRole")
            }
            Step::SetRoleCli { .. } | Step::Wait => unreachable!("{step:?} sends no request"),
        };
        Request {
            via,
            token,
            query,
            variables,
            field,
        }
    }

    /// The body of the answer, or None when a socket was refused.
    async fn send(&self, request: &Request) -> Option<Value> {
        let address = self.address(request.via.instance);
        let (token, variables) = (request.token.as_deref(), request.variables.clone());
        if !request.via.ws {
            let client = &self.app.client;
            return Some(gql_at(client, address, request.query, variables, token, None).await);
        }
        let mut socket = open_socket(address, token).await?;
        socket.subscribe("op", request.query, variables).await;
        let answer = socket.next_raw().await;
        assert_eq!(answer["type"], "next", "{answer}");
        let complete = socket.next_raw().await;
        assert_eq!(complete, json!({ "id": "op", "type": "complete" }));
        socket.close().await;
        Some(answer["payload"].clone())
    }

    /// Takes the model's next state that answers `seen`, or fails.
    fn judge(&mut self, step: &Step, end: Ban, seen: &Outcome, when: When) {
        let decider = self.model.decided_by(step);
        let banned = decider.map_or(Banned::No, |user| self.model.banned(user, when));
        let mut expected = Vec::new();
        for &resolution in banned.resolutions() {
            let mut next = self.model.clone();
            let outcome = next.step(step, end, resolution);
            if outcome.admits(seen) {
                self.model = next;
                return;
            }
            expected.push(outcome);
        }
        panic!(
            "step {}: {step:?} answered {seen:?}; the model expected {expected:?}\n\
             the model before it: {:?}",
            self.steps, self.model
        );
    }

    /// `votegraph set-role`, judged.
    fn set_role_cli(&mut self, step: &Step, target: usize, role: Role) {
        let role_name = role.api().to_lowercase();
        let out = set_role_cli(&self.app.redis.url(), NAMES[target], &role_name);
        let said = String::from_utf8_lossy(&out.stdout);
        let seen = match out.status.success() {
            true => Outcome::Cli {
                changed: !said.contains("was already"),
            },
            false if String::from_utf8_lossy(&out.stderr).contains("no user named") => {
                Outcome::CliNoUser
            }
            false => panic!("set-role failed: {out:?}"),
        };
        let at = now();
        self.judge(step, Ban::Forever, &seen, When::Between(at, at));
    }

    /// Sleeps until every timed ban has ended, with a margin.
    fn wait(&self) {
        let ends = self
            .model
            .accounts
            .iter()
            .flatten()
            .filter_map(|a| match a.ban {
                Some(Ban::Until(end)) => Some(end as f64),
                _ => None,
            });
        let left = ends.fold(0.0, f64::max) + 2.0 * MARGIN - now();
        if left > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(left));
        }
    }

    /// A socket of the token `step` may end (the one logging out, or the
    /// newest of the user a ban aims at), opened on the other instance
    /// before the step, when that token works.
    async fn watch(&self, step: &Step) -> Option<(usize, WsClient)> {
        let (token, instance) = match *step {
            Step::LogOut { token, instance } => (self.model.slot(token)?, 1 - instance),
            Step::Ban { target, via, .. } => (self.model.newest_token(target.0)?, 1 - via.instance),
            _ => return None,
        };
        let Token { user, live, ended } = self.model.tokens[token];
        let at = now();
        if !live || ended || self.model.banned(user, When::Between(at, at + 1.0)) != Banned::No {
            return None;
        }
        let socket = open_socket(self.address(instance), Some(&self.tokens[token])).await;
        let socket = socket.unwrap_or_else(|| {
            panic!(
                "step {}: a socket for live token {:?} was refused",
                self.steps,
                self.model.name_of(token)
            )
        });
        Some((token, socket))
    }

    /// The watched socket closes with 4403 when `step` ended its token;
    /// else it is closed here.
    async fn closes(&self, step: &Step, (token, mut socket): (usize, WsClient)) {
        let Token { live, ended, .. } = self.model.tokens[token];
        if live && !ended {
            socket.close().await;
            return;
        }
        match tokio::time::timeout(Duration::from_secs(5), socket.next()).await {
            Ok(Seen::Closed(4403, _)) => {}
            other => panic!(
                "step {}: after {step:?} the socket of token {:?} saw {other:?}",
                self.steps,
                self.model.name_of(token)
            ),
        }
    }

    /// Probes tokens `indexes` at once.
    async fn probe_all(&self, indexes: Vec<usize>) {
        join_all(indexes.into_iter().map(|index| self.probe(index))).await;
    }

    /// `me`, `setRole` on no one and `removeArticle` on the fixture with
    /// token `index`, judged field by field (a ban ending meanwhile may
    /// change one and not the next).
    async fn probe(&self, index: usize) {
        let address = self.address((index + self.steps) % 2);
        let token = Some(self.tokens[index].as_str());
        let ask =
            |query, variables| gql_at(&self.app.client, address, query, variables, token, None);
        let from = now();
        let me = ask(ME, json!({})).await;
        let set_role = ask(SET_ROLE_OF_NOBODY, json!({})).await;
        let remove = ask(REMOVE, json!({ "id": self.fixture })).await;
        let seen = Probed {
            me: me["data"]["me"].clone(),
            set_role: error_of(&set_role),
            remove: error_of(&remove),
        };
        let user = self.model.tokens[index].user;
        let banned = self.model.banned(user, When::Between(from, now()));
        let expected: Vec<Probed> = banned
            .resolutions()
            .iter()
            .map(|&resolution| self.model.probed(index, resolution))
            .collect();
        let fits = expected.iter().any(|e| e.me == seen.me)
            && expected.iter().any(|e| e.set_role == seen.set_role)
            && expected.iter().any(|e| e.remove == seen.remove);
        assert!(
            fits,
            "step {}: token {:?} probed {seen:?}; the model expected {expected:?}\n\
             the model: {:?}",
            self.steps,
            self.model.name_of(index),
            self.model
        );
    }

    /// The tokens worth probing after a step: the live ones, and those
    /// the step ended or made (`before`: the tokens before it).
    fn probed_after(&self, before: &[Token]) -> Vec<usize> {
        let tokens = self.model.tokens.iter().enumerate();
        let ended_or_made = |i: usize| before.get(i).is_none_or(|t| t.live);
        tokens
            .filter(|&(i, t)| t.live || ended_or_made(i))
            .map(|(i, _)| i)
            .collect()
    }
}

/// The model-based test: plans from [`Plan`], run on [`Servers`].
struct RolesModel;

impl StateMachineTest for RolesModel {
    type SystemUnderTest = Servers;
    type Reference = Plan;

    fn init_test(_: &Model) -> Servers {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let run = runtime.block_on(Run::start());
        Servers { run, runtime }
    }

    fn apply(mut servers: Servers, _: &Model, step: Step) -> Servers {
        let Servers { run, runtime } = &mut servers;
        run.steps += 1;
        STEPS.with(|steps| steps.set(steps.get() + 1));
        let before = run.model.tokens.clone();
        match step {
            Step::Wait => run.wait(),
            Step::SetRoleCli { target, role } => run.set_role_cli(&step, target.0, role),
            _ => runtime.block_on(run.act(&step)),
        }
        runtime.block_on(run.probe_all(run.probed_after(&before)));
        servers
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |value| {
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number"))
    })
}

thread_local! {
    /// Set while proptest runs cases on this thread: it reports what
    /// their panics say once it has shrunk them.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Runs `run` with the panics of this thread unprinted.
fn quietly<T>(run: impl FnOnce() -> T) -> T {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let print = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                print(info);
            }
        }));
    });
    QUIET.with(|quiet| quiet.set(true));
    let result = run();
    QUIET.with(|quiet| quiet.set(false));
    result
}

/// Runs the case that `seed` plans, shrinking a failure for at most
/// `shrink_secs`.
fn run_case(seed: u64, shrink_secs: u64) {
    let config = Config {
        cases: 1,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        max_shrink_time: u32::try_from(shrink_secs * 1000).unwrap_or(u32::MAX),
        // Bounded by time alone (`u32::MAX` would mean 4 per case).
        max_shrink_iters: u32::MAX - 1,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config.clone());
    let strategy = Plan::sequential_strategy(1..=MAX_STEPS);
    let result = quietly(|| {
        runner
            .run(&strategy, |(model, steps, seen)| {
                RolesModel::test_sequential(config.clone(), model, steps, seen);
                Ok(())
            })
            .map_err(Box::new)
    });
    let failure = match result.map_err(|failure| *failure) {
        Ok(()) => return,
        Err(TestError::Abort(why)) => panic!("seed {seed}: proptest gave up: {why}"),
        Err(TestError::Fail(why, (_, steps, _))) => (why, steps),
    };
    let (why, steps) = failure;
    let steps: Vec<String> = steps
        .iter()
        .enumerate()
        .map(|(i, step)| format!("  {}. {step:?}", i + 1))
        .collect();
    panic!(
        "{why}\nThe smallest failing sequence found (root#0: root's token from before):\n{}\n\
         Replay with VOTEGRAPH_MODEL_SEED={seed} VOTEGRAPH_MODEL_SECS=0 \
         cargo test --test api roles_model -- --nocapture",
        steps.join("\n")
    );
}

#[test]
fn random_runs_agree_with_the_model() {
    let budget = Duration::from_secs(env_number("VOTEGRAPH_MODEL_SECS", 180));
    let shrink_secs = env_number("VOTEGRAPH_MODEL_SHRINK_SECS", 120);
    let first = env_number("VOTEGRAPH_MODEL_SEED", rand::random());
    let started = Instant::now();
    let mut cases = 0;
    while cases == 0 || started.elapsed() < budget {
        run_case(first.wrapping_add(cases), shrink_secs);
        cases += 1;
    }
    eprintln!(
        "roles_model: {} steps in {cases} cases in {:.0?} (seeds from {first})",
        STEPS.with(Cell::get),
        started.elapsed()
    );
}

/// Runs `steps` as a case, with the probes after each.
fn replay(steps: Vec<Step>) {
    RolesModel::test_sequential(Config::default(), Model::bootstrap(), steps, None);
}

const HTTP: Via = Via {
    instance: 0,
    ws: false,
};
const OTHER: Via = Via {
    instance: 1,
    ws: false,
};
const ROOT: User = User(0);
const ANN: User = User(1);
const ROOTS_TOKEN: TokenOf = TokenOf { user: 0, nth: 0 };
/// Ann's second: her first, from `signUp`, is logged out.
const ANNS_LOGIN: TokenOf = TokenOf { user: 1, nth: 1 };

/// Ann made `role` after a ban that ended, logged in, then made a member
/// again: her new token must act as a member.
fn demoted_after_a_timed_ban(role: Role) -> Vec<Step> {
    let set_role = |role| Step::SetRole {
        actor: ROOTS_TOKEN,
        target: ANN,
        role,
        via: HTTP,
    };
    vec![
        Step::SignUp {
            user: ANN,
            via: HTTP,
        },
        Step::LogOut {
            token: TokenOf { user: 1, nth: 0 },
            instance: 0,
        },
        Step::Ban {
            actor: ROOTS_TOKEN,
            target: ANN,
            secs: Some(1),
            via: HTTP,
        },
        Step::Wait,
        set_role(role),
        Step::LogIn {
            user: ANN,
            via: OTHER,
        },
        set_role(Role::Member),
    ]
}

#[test]
fn a_demoted_admin_has_no_admin_rights_once_a_timed_ban_ended() {
    let mut steps = demoted_after_a_timed_ban(Role::Admin);
    // She tries to take the role back and to demote root.
    for (target, role) in [(ANN, Role::Admin), (ROOT, Role::Member)] {
        steps.push(Step::SetRole {
            actor: ANNS_LOGIN,
            target,
            role,
            via: OTHER,
        });
    }
    replay(steps);
}

#[test]
fn a_demoted_moderator_removes_nothing_once_a_timed_ban_ended() {
    replay(demoted_after_a_timed_ban(Role::Moderator));
}
