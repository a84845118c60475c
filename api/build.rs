//! Compiles Tair's protos (`api/proto/tair/`, served over gRPC by `src/grpc.rs`) into one encoded
//! `FileDescriptorSet` with protox — pure Rust, so a fresh machine needs no `protoc`.

use prost::Message;

fn main() {
    let protos = ["proto/tair/meta_service.proto", "proto/tair/admin_service.proto", "proto/tair/debug_service.proto"];
    for p in &protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let set = protox::compile(protos, ["proto/tair"]).expect("the protos in proto/tair compile");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("tair_descriptor.bin");
    std::fs::write(&out, set.encode_to_vec()).expect("write the descriptor set");
}
