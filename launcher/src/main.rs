mod policy;
fn main() {}
