use holdfast_wire::*;
#[test]
fn dump() {
    for f in std::fs::read_dir("tests/fixtures").unwrap() {
        let p = f.unwrap().path();
        if p.extension().map(|e| e != "hex").unwrap_or(true) { continue; }
        let four = p.to_str().unwrap().contains("4oct");
        println!("== {p:?}");
        for line in std::fs::read_to_string(&p).unwrap().lines() {
            let b: Vec<u8> = (0..line.len()).step_by(2).map(|i| u8::from_str_radix(&line[i..i+2], 16).unwrap()).collect();
            let ctx = CodecCtx { four_octet_as: four, ibgp: false };
            let t = b[18];
            if t == 2 { println!("{:?}", decode_update(&b[19..], &ctx)); } else { println!("{:?}", decode_message(&b, &ctx)); }
        }
    }
}
