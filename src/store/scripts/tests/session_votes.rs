//! The logged-in page's one read: a session and its user's votes (pages
//! filled from templates are tested through the API, `my_vote.rs`).

use super::*;

async fn read(c: &mut Conn, session: &str, members: &[String]) -> SessionVotes {
    session_votes(c, At::SINGLE, keys::session(session), members)
        .await
        .expect("the script runs")
}

#[tokio::test]
async fn a_session_comes_with_its_users_votes_in_order_however_many() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let () = q(c, cmd("SET").arg(keys::session("h")).arg("ann moderator")).await;
    let index = keys::user_votes("ann");
    let () = q(c, cmd("ZADD").arg(&index).arg(5).arg("article:1")).await;
    let () = q(c, cmd("ZADD").arg(&index).arg(-7).arg("article:2500")).await;
    let members: Vec<String> = (0..2_501).map(|n| format!("article:{n}")).collect();
    let SessionVotes::Session(session, votes) = read(c, "h", &members).await else {
        panic!("no session");
    };
    assert_eq!(session, "ann moderator");
    let Value::Array(votes) = votes else {
        panic!("{votes:?}")
    };
    let voted: Vec<(usize, f64)> = votes
        .iter()
        .enumerate()
        .filter_map(|(n, v)| Some((n, crate::store::value_f64(v)?)))
        .collect();
    assert_eq!(voted, [(1, 5.0), (2_500, -7.0)], "{} read", votes.len());
    assert_eq!(votes.len(), members.len());

    assert_eq!(read(c, "gone", &members).await, SessionVotes::None);
    let none = read(c, "h", &[]).await;
    assert_eq!(
        none,
        SessionVotes::Session("ann moderator".into(), Value::Array(vec![]))
    );
}
