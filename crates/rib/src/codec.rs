//! The codec functions used by the RIB, all from `holdfast-wire`.

pub(crate) use holdfast_wire::{
    decode_update, encode_attrs, encode_end_of_rib, pack_announce, pack_withdraw, CodecCtx,
    Rfc7606Action,
};
