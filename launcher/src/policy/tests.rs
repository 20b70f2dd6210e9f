//! Loading through the hierarchy: precedence, trust, ceilings, flags.
