//! Streamed text input: the caller's side of a request whose text arrives in pieces.
//! Text is tokenized on the caller's thread as it arrives and only whole-text-equivalent
//! token ids cross to the engine.

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};

use crossbeam_channel::Sender;
use tts_model::text_stream::TextStream;
use tts_model::Model;

use crate::client::{RequestShared, TextMsg};
use crate::error::TextError;

/// Feeds a streamed-text request. Text is tokenized here as it arrives (see
/// `tts_model::text_stream` for the rule that keeps it equal to tokenizing the whole
/// text); dropping the sender ends the text like [`finish`](Self::finish).
pub struct TextSender {
    model: Arc<Model>,
    stream: TextStream,
    tx: Option<mpsc::Sender<TextMsg>>,
    shared: Arc<RequestShared>,
    wake: Sender<()>,
    max_chars: usize,
    sent_chars: usize,
}

impl TextSender {
    pub(crate) fn new(
        model: Arc<Model>,
        tx: mpsc::Sender<TextMsg>,
        shared: Arc<RequestShared>,
        wake: Sender<()>,
        max_chars: usize,
    ) -> Self {
        Self {
            model,
            stream: TextStream::new(),
            tx: Some(tx),
            shared,
            wake,
            max_chars,
            sent_chars: 0,
        }
    }
}

impl std::fmt::Debug for TextSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextSender")
            .field("pending", &self.stream.pending())
            .finish()
    }
}

impl TextSender {
    /// Appends text. Never blocks; the total stays bounded by the engine's text limit.
    pub fn push(&mut self, text: &str) -> Result<(), TextError> {
        if self.shared.cancelled.load(Ordering::Acquire) || self.tx.is_none() {
            return Err(TextError::Closed);
        }
        if self.stream.chars() + text.chars().count() > self.max_chars {
            return Err(TextError::TooLong {
                max: self.max_chars,
            });
        }
        let ids = self
            .stream
            .push(&self.model.tokenizer, text)
            .map_err(|e| TextError::Tokenizer(e.to_string()))?;
        if !ids.is_empty() {
            self.send(TextMsg::Tokens {
                ids,
                chars: self.stream.chars() - self.sent_chars,
            })?;
            self.sent_chars = self.stream.chars();
        }
        Ok(())
    }

    /// Ends the text: what is pending is tokenized and the talker is told no more comes.
    pub fn finish(mut self) -> Result<(), TextError> {
        self.end()
    }

    fn end(&mut self) -> Result<(), TextError> {
        if self.tx.is_none() {
            return Ok(());
        }
        let ids = self
            .stream
            .finish(&self.model.tokenizer)
            .map_err(|e| TextError::Tokenizer(e.to_string()));
        let sent = match ids {
            Ok(ids) => self.send(TextMsg::Tokens {
                ids,
                chars: self.stream.chars() - self.sent_chars,
            }),
            Err(e) => Err(e),
        };
        // End the text even when the tail failed, so the request does not wait forever.
        let ended = self.send(TextMsg::End);
        self.tx = None;
        sent.and(ended)
    }

    fn send(&mut self, msg: TextMsg) -> Result<(), TextError> {
        let tx = self.tx.as_ref().ok_or(TextError::Closed)?;
        tx.send(msg).map_err(|_| TextError::Closed)?;
        let _ = self.wake.try_send(());
        Ok(())
    }
}

impl Drop for TextSender {
    fn drop(&mut self) {
        let _ = self.end();
    }
}
