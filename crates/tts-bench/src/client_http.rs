//! `POST /v1/audio/speech` with `response_format: pcm, stream_format: audio`: the chunked
//! body is raw s16le mono PCM, fed to the stream trace frame by frame as hyper reads it.
//! One pooled plain-HTTP/1.1 client (keep-alive, `TCP_NODELAY`) serves the whole run.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::client::CallError;
use crate::record::CallInfo;
use crate::spec::{BenchSpec, DEFAULT_SAMPLE_RATE};
use crate::stream::StreamTrace;

/// Error bodies are read up to this size.
const MAX_ERROR_BODY: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct HttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
    speech_uri: Uri,
    ready_uri: Uri,
    auth: Option<HeaderValue>,
}

impl HttpClient {
    pub fn new(spec: &BenchSpec) -> anyhow::Result<Self> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(10)));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        let auth = match &spec.api_key {
            Some(key) => {
                let mut v = HeaderValue::from_str(&format!("Bearer {key}"))
                    .map_err(|_| anyhow::anyhow!("--api-key holds characters a header cannot"))?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        Ok(Self {
            client,
            speech_uri: spec.speech_uri.clone(),
            ready_uri: spec.ready_uri.clone(),
            auth,
        })
    }

    /// `GET /ready`: the status code.
    pub async fn ready(&self) -> Result<u16, CallError> {
        let mut req = Request::builder()
            .method(Method::GET)
            .uri(self.ready_uri.clone());
        if let Some(a) = &self.auth {
            req = req.header(AUTHORIZATION, a.clone());
        }
        let req = req
            .body(Full::new(Bytes::new()))
            .map_err(|e| CallError::Protocol(e.to_string()))?;
        let resp = self
            .client
            .request(req)
            .await
            .map_err(|e| CallError::Transport(error_chain(&e)))?;
        let status = resp.status().as_u16();
        // Read the (small) body so the connection returns to the pool.
        let _ = Limited::new(resp.into_body(), MAX_ERROR_BODY)
            .collect()
            .await;
        Ok(status)
    }

    pub async fn speak(
        &self,
        spec: &BenchSpec,
        text: &str,
        request_id: &str,
        sent: Instant,
        trace: &mut StreamTrace,
        info: &mut CallInfo,
    ) -> Result<(), CallError> {
        let body = serde_json::to_vec(&spec.http_body(text))
            .map_err(|e| CallError::Protocol(e.to_string()))?;
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(self.speech_uri.clone())
            .header(CONTENT_TYPE, "application/json")
            .header("x-request-id", request_id);
        if let Some(a) = &self.auth {
            req = req.header(AUTHORIZATION, a.clone());
        }
        let req = req
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| CallError::Protocol(e.to_string()))?;

        let resp = self
            .client
            .request(req)
            .await
            .map_err(|e| CallError::Transport(error_chain(&e)))?;
        let (parts, mut body) = resp.into_parts();
        info.request_id = header_str(&parts.headers, "x-request-id");
        if !parts.status.is_success() {
            let retry_after = header_str(&parts.headers, RETRY_AFTER.as_str());
            let message = match Limited::new(body, MAX_ERROR_BODY).collect().await {
                Ok(b) => error_message(&b.to_bytes()),
                Err(e) => format!("(error body unreadable: {e})"),
            };
            return Err(CallError::Http {
                status: parts.status.as_u16(),
                message,
                retry_after,
            });
        }
        if let Some(ct) = header_str(&parts.headers, CONTENT_TYPE.as_str()) {
            let ct = ct.to_ascii_lowercase();
            let raw = ["audio/pcm", "audio/l16", "application/octet-stream"];
            if !raw.iter().any(|r| ct.starts_with(r)) {
                return Err(CallError::Protocol(format!(
                    "Content-Type {ct:?} is not raw PCM"
                )));
            }
        }
        let sample_rate = match header_str(&parts.headers, "x-sample-rate") {
            None => DEFAULT_SAMPLE_RATE,
            Some(v) => v.trim().parse().ok().filter(|&r| r > 0).ok_or_else(|| {
                CallError::Protocol(format!("X-Sample-Rate {v:?} is not a sample rate"))
            })?,
        };
        trace.set_sample_rate(sample_rate);

        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| CallError::Transport(error_chain(&e)))?;
            if let Ok(data) = frame.into_data() {
                trace.push(sent.elapsed(), &data);
            }
        }
        Ok(())
    }
}

fn header_str(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The message of an OpenAI-style error body `{"error": {"message": ..}}`, else the body
/// as text (shortened).
pub fn error_message(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        if let Some(m) = v
            .get("error")
            .and_then(|e| e.get("message"))
            .and_then(|m| m.as_str())
        {
            return m.to_string();
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

/// An error with its sources, `a: b: c` (hyper's top-level messages say little alone).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(src) = cur {
        s.push_str(": ");
        s.push_str(&src.to_string());
        cur = src.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_from_openai_envelopes_and_plain_text() {
        let b =
            br#"{"error":{"message":"queue full","type":"rate_limit","param":null,"code":"busy"}}"#;
        assert_eq!(error_message(b), "queue full");
        assert_eq!(error_message(b"  oops \n"), "oops");
        assert_eq!(error_message(&[b'x'; 300]).len(), 203);
    }
}
