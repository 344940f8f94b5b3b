import torch

from paraformer_asr.data.tokenizer import CharTokenizer


def test_round_trip_and_specials():
    tok = CharTokenizer.build(["hello world", "abc"])
    assert tok.symbols[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"] and tok.blank_id is None
    for text in ["hello", "a b c", "world hello"]:
        ids = tok.encode(text)
        assert len(ids) == len(text) and all(i >= tok.num_special for i in ids)
        assert tok.decode(ids) == text
    assert tok.encode("ab", add_bos=True, add_eos=True)[0] == tok.bos_id
    assert tok.decode(tok.encode("ab", add_bos=True, add_eos=True) + tok.encode("c")) == "ab"  # stops at eos
    assert tok.encode("z") == [tok.unk_id] and tok.decode([tok.unk_id, tok.pad_id]) == ""


def test_blank_and_serialisation():
    tok = CharTokenizer.build(["ba"], with_blank=True)
    assert tok.blank_id == 4 and tok.symbols[4] == "<blank>" and tok.vocab_size == 7
    again = CharTokenizer.from_dict(tok.to_dict())
    assert again.symbols == tok.symbols and again.blank_id == 4


def test_batch_encode_pads_with_pad_id():
    tok = CharTokenizer.build(["abc"])
    tokens, lengths = tok.batch_encode(["abc", "a", ""])
    assert tokens.shape == (3, 3) and tokens.dtype == torch.long
    assert lengths.tolist() == [3, 1, 0]
    assert tokens[1, 1:].tolist() == [tok.pad_id] * 2 and tokens[2].tolist() == [tok.pad_id] * 3
