//! Generates the `apache.rocketmq.v2` gRPC types from the `.proto` files under `proto/`.
//!
//! The protos are parsed by `protox`, a pure-Rust protobuf compiler, so building ferrymq never
//! needs a system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/apache/rocketmq/v2/definition.proto",
        "proto/apache/rocketmq/v2/service.proto",
    ];
    for p in &protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        // Message bodies decode as `bytes::Bytes` slices of the receive buffer: the embedded
        // broker stores and re-sends them without copying, and clients send shared bodies.
        .bytes(".apache.rocketmq.v2.Message.body")
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
