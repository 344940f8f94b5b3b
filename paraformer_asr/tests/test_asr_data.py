import torch

from paraformer_asr.data.batching import Collator, LengthBucketBatchSampler
from paraformer_asr.data.toy import ToySeq2SeqDataset

ITEM_KEYS = {"id", "features", "tokens", "text", "duration_s", "boundaries"}


def test_toy_items_follow_the_contract(tiny_cfg, tiny_data):
    toy = tiny_cfg.data.toy
    for index in range(10):
        item = tiny_data.train[index]
        assert set(item) == ITEM_KEYS
        features, tokens, bounds = item["features"], item["tokens"], item["boundaries"]
        assert features.dtype == torch.float32 and features.shape[1] == toy.feature_dim
        assert float(features.min()) >= -2.0 and float(features.max()) <= 2.0
        assert tokens.dtype == torch.long and tokens.shape == bounds.shape
        assert toy.min_tokens <= tokens.numel() <= toy.max_tokens
        assert tiny_data.tokenizer.decode(tokens) == item["text"]
        assert int(bounds[-1]) == features.shape[0] - 1 and bool((bounds[1:] > bounds[:-1]).all())
        durations = torch.diff(bounds, prepend=torch.tensor([-1]))
        assert int(durations.min()) >= toy.min_frames_per_token and int(durations.max()) <= toy.max_frames_per_token
        assert item["duration_s"] == features.shape[0] * 0.01
        assert all(a != b for a, b in zip(item["text"], item["text"][1:]))  # no character twice in a row
    assert tiny_data.train.frame_counts()[:10] == [tiny_data.train[i]["features"].shape[0] for i in range(10)]


def test_toy_item_is_a_pure_function_of_seed_and_index(tiny_cfg, tiny_data):
    again = ToySeq2SeqDataset.from_config(tiny_cfg.data.toy, "train", tiny_data.tokenizer)
    torch.manual_seed(123)  # the global RNG must not matter
    for index in (5, 0, 17):
        a, b = tiny_data.train[index], again[index]
        assert torch.equal(a["features"], b["features"]) and a["text"] == b["text"]
    val = ToySeq2SeqDataset.from_config(tiny_cfg.data.toy, "val", tiny_data.tokenizer)
    assert val[0]["text"] != tiny_data.train[0]["text"] or not torch.equal(val[0]["features"], tiny_data.train[0]["features"])


def test_collate_pads_and_masks(tiny_data):
    items = [tiny_data.train[i] for i in range(4)]
    batch = Collator(tiny_data.tokenizer.pad_id)(items)
    t_max = max(i["features"].shape[0] for i in items)
    s_max = max(i["tokens"].shape[0] for i in items)
    assert batch.features.shape == (4, t_max, 16) and batch.tokens.shape == (4, s_max)
    assert batch.feat_mask.dtype == torch.bool and batch.feat_mask.sum(1).tolist() == batch.feat_lengths.tolist()
    assert batch.boundaries.shape == (4, s_max)
    for row, item in enumerate(items):
        length, count = item["features"].shape[0], item["tokens"].shape[0]
        assert torch.equal(batch.features[row, :length], item["features"])
        assert float(batch.features[row, length:].abs().sum()) == 0.0
        assert batch.tokens[row, count:].eq(tiny_data.tokenizer.pad_id).all()
        assert batch.boundaries[row, count:].eq(-1).all()


def test_bucket_sampler_covers_everything_once_deterministically_and_resumes():
    lengths = [int(x) for x in torch.randint(10, 200, (203,), generator=torch.Generator().manual_seed(0))]
    sampler = LengthBucketBatchSampler(lengths, batch_size=8, seed=3, pool_batches=4)
    sampler.set_epoch(1)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(203))
    assert batches == list(sampler)
    sampler.set_epoch(2)
    assert list(sampler) != batches
    sampler.set_epoch(1, start_batch=5)
    assert list(sampler) == batches[5:] and len(sampler) == len(batches) - 5
    padding = sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in batches)
    chunks = [list(range(i, min(i + 8, 203))) for i in range(0, 203, 8)]
    random_padding = sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in chunks)
    assert padding < random_padding / 3


def test_bucket_sampler_follows_lengths_that_change_per_epoch():
    lengths = list(range(100, 164))

    def reversed_on_odd(epoch):
        return lengths if epoch % 2 == 0 else lengths[::-1]

    sampler = LengthBucketBatchSampler(lengths, batch_size=8, shuffle=False, lengths_of_epoch=reversed_on_odd)
    sampler.set_epoch(0)
    assert list(sampler)[0] == list(range(8))  # shortest first
    sampler.set_epoch(1)
    assert list(sampler)[0] == list(range(63, 55, -1))
