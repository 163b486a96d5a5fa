//! Two engines behind one server (`replicas = 2`): requests spread over both, each engine
//! keeps its own share of slots and queue, and the gauges add up over them.

use std::time::Duration;

use futures_util::SinkExt;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;
use crate::faults::next_json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_share_the_work_and_the_limits() {
    let mut cfg = config();
    cfg.replicas = 2;
    cfg.max_slots = 2; // one slot per engine
    cfg.max_queue = 2; // one waiting request per engine
    let t = TestServer::start(cfg).await;
    // The server is ready once one engine is; the routing below assumes both are (a
    // request goes to ready engines first, so while one still warms up both would go to
    // the other, and the second would wait for its slot).
    eventually("both engines warmed up", || async {
        metric(&t.metrics().await, "tts_engines_ready") == Some(2.0)
    })
    .await;

    // 1. Two WebSocket utterances waiting for their text: with one slot per engine, both
    //    hold a slot only if they went to different engines.
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let (mut ws, _) = tokio_tungstenite::connect_async(t.ws_url("/v1/audio/speech/stream"))
            .await
            .unwrap();
        ws.send(Message::text(
            json!({"type": "start", "voice": "ryan"}).to_string(),
        ))
        .await
        .unwrap();
        // a request sent to an engine whose slot is taken would wait here, unstarted
        let started = tokio::time::timeout(Duration::from_secs(60), next_json(&mut ws))
            .await
            .expect("the utterance starts: it went to the engine with a free slot");
        assert_eq!(started["type"], "started", "{started}");
        sessions.push(ws);
    }
    eventually("both engines hold a request, none waits", || async {
        let m = t.metrics().await;
        metric(&m, "tts_active_requests") == Some(2.0) && metric(&m, "tts_queue_depth") == Some(0.0)
    })
    .await;

    // 2. Each engine's queue takes one more; the pool's gauge adds them up.
    let mut queued = Vec::new();
    for i in 0..2 {
        let r = t
            .speech(json!({"input": format!("Waiting {i}."), "response_format": "pcm"}))
            .await;
        assert_eq!(r.status(), 200);
        queued.push(r);
    }
    eventually("two requests wait, one per engine", || async {
        let m = t.metrics().await;
        metric(&m, "tts_active_requests") == Some(2.0) && metric(&m, "tts_queue_depth") == Some(2.0)
    })
    .await;

    // 3. Both queues full: refused with the pool's whole capacity named.
    let r = t
        .speech(json!({"input": "No room.", "response_format": "pcm"}))
        .await;
    assert_eq!(r.status(), 429);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_error(&body, "queue_full", None);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("(2 requests waiting)"),
        "{body}"
    );

    // 4. The slot holders leave: the waiting requests run to their end.
    for ws in &mut sessions {
        ws.send(Message::text(json!({"type": "cancel"}).to_string()))
            .await
            .unwrap();
        let cancelled = next_json(ws).await;
        assert_eq!(cancelled["type"], "cancelled", "{cancelled}");
    }
    for r in queued {
        let audio = r.bytes().await.unwrap();
        assert!(!audio.is_empty() && audio.len() % 2 == 0);
    }
    for mut ws in sessions {
        ws.close(None).await.unwrap();
    }
    t.wait_idle().await;
    t.assert_serving().await;
    t.stop().await;
}
