//! Optional API keys: with any configured, every route but `/health` needs
//! `Authorization: Bearer <key>` (or, for browsers and WebSocket clients that cannot set
//! headers, an `api_key=<key>` query parameter).

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::AppState;

pub async fn require_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let keys = &state.config().api_keys;
    if keys.is_empty() || req.uri().path() == "/health" {
        return next.run(req).await;
    }
    let presented = bearer(&req).or_else(|| query_key(&req));
    match presented {
        Some(k)
            if keys
                .iter()
                .any(|key| constant_time_eq(key.as_bytes(), k.as_bytes())) =>
        {
            next.run(req).await
        }
        Some(_) => ApiError::unauthorized("incorrect API key provided").into_response(),
        None => ApiError::unauthorized("missing API key: send `Authorization: Bearer <key>`")
            .into_response(),
    }
}

fn bearer(req: &Request) -> Option<String> {
    let v = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = v.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| key.trim().to_string())
}

fn query_key(req: &Request) -> Option<String> {
    req.uri().query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == "api_key").then(|| percent_decode(v))
    })
}

/// Decodes `%XX` escapes and `+` (keys are usually plain ASCII).
fn percent_decode(s: &str) -> String {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Compares without an early exit on the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert_eq!(percent_decode("a%2Fb+c"), "a/b c");
        assert_eq!(percent_decode("50%"), "50%");
    }
}
