//! The streaming engine (see DESIGN.md): scheduler, engine loop, chunking, onset trim.
