//! Sets the linker flags a Node addon needs (undefined N-API symbols are
//! resolved by the `node` process that loads the library).

fn main() {
    napi_build::setup();
}
