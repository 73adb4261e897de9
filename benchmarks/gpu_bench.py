"""GPU benchmark for the PyTorch path (issue 5): produces the "GPU (NVIDIA H200)" tables.

Sections (each prints as it finishes; everything also goes to --out JSON):
  peaks    measured ceilings: bf16/fp16 matmul TFLOP/s, device-to-device copy GB/s
  stage    det at 960x960 (pages/s) and rec at 48x320 (lines/s): eager FP32, eager FP16,
           compiled FP16, compiled + CUDA graphs FP16, BF16 (+ CUDA graphs); batch-1 latency
           p50/p95, best-batch throughput, peak memory, compile (cold) time
  e2e      GpuScheduler end to end on N synthetic pages (>= 30 lines each) and the dev set:
           pages/s, single-page latency, GPU utilisation (nvidia-smi sampled every 100 ms),
           host CPU seconds per page, peak GPU memory, CER vs labels per precision
  ort      the normal ocrforge engine on ONNX Runtime CPU (16 threads) on a subset, same pages
  warm     second start of a compiled network in a fresh process (inductor cache hit)

Example (what docs/BENCHMARKS.md ran on the H200):
  PYTHONPATH=src python benchmarks/gpu_bench.py --model-dir .models --font .models/fonts/simfang.ttf \
      --dev .devset --pages 1000 --out $OUT/gpu_bench.json
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from gpu_probe import MemoryTrace, fmt_memory, fmt_stage_kernels, reserved_by_stream, stage_kernels

T_START = time.perf_counter()
RESULTS: dict = {}

COMMON_ZH = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说"
    "产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点"
    "从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又"
    "么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入"
    "常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西"
    "被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认"
    "六共权收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才"
    "科张信马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商"
    "非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选"
    "标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价"
    "严首底液官德随病苏失尔死讲配女黄推显谈罪神艺呢席含企望密批营项防举球英氧势告李台落木帮轮破亚师围注远"
    "字材排供河态封另施减树溶怎止案言士均武固叶鱼波视仅费紧爱左章早朝害续轻服试食充兵源判护司足某练差致板"
    "田降黑犯负击范继兴似余坚曲输修故城夫够送笔船占右财吃富春职觉汉画功巴跟虽杂飞检吸助升阳互初创抗考投坏"
    "策古径换未跑留钢曾端责站简述钱副尽帝射草冲承独令限阿宣环双请超微让控州良轴找否纪益依优顶础载倒房突坐"
    "粉敌略客袁冷胜绝析块剂测丝协诉念陈仍罗盐友洋错苦夜刑移频逐靠混母短皮终聚汽村云哪既距卫停烈央察烧迅境"
    "若印洲刻括激孔搞甚室待核校散侵吧甲游久菜味旧模湖货损预阻毫普稳乙妈植息扩银语挥酒守拿序纸医缺雨吗针刘"
    "啊急唱误训愿审附获茶鲜粮斤孩脱硫肥善龙演父渐血欢械掌歌沙刚攻谓盾讨晚粒乱燃矛乎杀药宁鲁贵钟煤读班伯香"
    "介迫句丰培握兰担弦蛋沉假穿执答乐谁顺烟缩征脸喜松脚困异免背星福买染井概慢怕磁倍祖皇促静补评翻肉践尼衣"
    "宽扬棉希伤操垂秋宜氢套督振架亮末宪庆编牛触映雷销诗座居抓裂胞呼娘景威绿晶厚盟衡鸡孙延危胶屋乡临陆顾掉"
    "呀灯岁措束耐剧玉赵跳哥季课凯胡额款绍卷齐伟蒸殖永宗苗川炉岩弱零杨奏沿露杆探滑镇饭浓航怀赶库夺伊灵税途"
    "灭赛归召鼓播盘裁险康唯录菌纯借糖盖横符私努堂域枪润幅哈竟熟虫泽脑壤碳欧遍侧寨敢彻虑斜薄庭纳弹饲伸折麦"
    "湿暗荷瓦塞床筑恶户访塔奇透梁刀旋迹卡氯遇份毒泥退洗摆灰彩卖耗夏择忙铜献硬予繁圈雪函亦抽篇阵阴丁尺追堆"
    "雄迎泛爸楼避谋吨野猪旗累偏典馆索秦脂潮爷豆忽托惊塑遗愈朱替纤粗倾尚痛楚谢奋购磨君池旁碎骨监捕弟暴割贯"
    "殊释词亡壁顿宝午尘闻揭炮残冬桥妇警综招吴付浮遭徐您摇谷赞箱隔订男吹园纷唐败宋玻巨耕坦荣闭湾键凡驻锅救"
    "恩剥凝碱齿截炼麻纺禁废盛版缓净睛昌婚涉筒嘴插岸朗庄街藏姑贸腐奴啦惯乘伙恢匀纱扎辩耳彪臣亿璃抵脉秀萨俄"
    "网舞店喷纵寸汗挂洪贺闪柬爆烯津稻墙软勇像滚厘蒙芳肯坡柱荡腿仪旅尾轧冰贡登黎削钻勒逃障氨郭峰币港伏轨亩"
    "毕擦莫刺浪秘援株健售股岛甘泡睡童铸汤阀休汇舍牧绕炸哲磷绩朋淡尖启陷柴呈徒颜泪稍忘泵蓝拖洞授镜辛壮锋贫"
    "虚弯摩泰幼廷尊窗纲弄隶疑氏宫姐震瑞怪尤琴循描膜违夹腰缘珠穷森枝竹沟催绳忆邦剩幸浆栏拥牙贮礼滤钠纹罢拍"
    "咱喊袖埃勤罚焦潜伍墨欲缝姓刊饱仿奖铝鬼丽跨默挖链扫喝袋炭污幕诸弧励梅奶洁灾舟鉴苯讼抱毁懂寒智埔寄届跃"
)
EN_WORDS = ("invoice total amount date order number customer address phone email account payment "
            "balance tax subtotal item quantity price unit report summary page section table figure "
            "model speed accuracy batch graph tensor memory device server request response status "
            "shipping delivery warehouse product code reference contract signature approved pending").split()


# ---------------------------------------------------------------------------- synthetic pages
def _render(args) -> dict:
    i, out_dir, font_path, seed = args
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed * 100_003 + i)
    W, H = 1024, 1448
    img = Image.new("L", (W, H), int(rng.integers(235, 256)))
    d = ImageDraw.Draw(img)
    size = int(rng.integers(22, 27))
    font = ImageFont.truetype(font_path, size)
    lines = []
    y = 40
    step = int(size * 1.55)
    while y + step < H - 40:
        x = int(rng.integers(40, 120))
        kind = rng.random()
        if kind < 0.4:
            n = int(rng.integers(6, 22))
            text = "".join(rng.choice(list(COMMON_ZH), n))
        elif kind < 0.8:
            text = " ".join(rng.choice(EN_WORDS, int(rng.integers(3, 9))))
            if rng.random() < 0.5:
                text = text.capitalize()
        else:
            text = (f"{rng.choice(EN_WORDS).upper()} {int(rng.integers(1, 99999))}-"
                    f"{int(rng.integers(10, 99))} {rng.integers(1, 9999) / 100:.2f}")
        while d.textlength(text, font=font) > W - x - 40 and len(text) > 4:
            text = text[:-1]
        text = text.strip()
        x0, y0, x1, y1 = d.textbbox((x, y), text, font=font)
        d.text((x, y), text, fill=int(rng.integers(0, 60)), font=font)
        lines.append({"text": text, "poly": [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]})
        y += step
    arr = np.asarray(img, np.int16) + rng.normal(0, 4, (H, W)).astype(np.int16)
    img = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).convert("RGB")
    name = f"images/p{i:05d}.jpg"
    img.save(Path(out_dir) / name, quality=90)
    return {"image": name, "lang": "mixed", "kind": "document", "lines": lines}


def synth_pages(out_dir: Path, n: int, font: str, seed: int = 0) -> Path:
    from multiprocessing import Pool

    (out_dir / "images").mkdir(parents=True, exist_ok=True)
    with Pool(min(16, os.cpu_count() or 2)) as pool:
        recs = pool.map(_render, [(i, str(out_dir), font, seed) for i in range(n)], chunksize=8)
    with open(out_dir / "labels.jsonl", "w", encoding="utf-8") as f:
        for r in recs:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return out_dir


def pages_digest(out_dir: Path) -> str:
    """sha256 over the rendered page files: equal digests mean the very same pages (so CER
    of another engine measured on another machine compares like for like)."""
    import hashlib

    h = hashlib.sha256()
    for p in sorted((out_dir / "images").iterdir()):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


# ---------------------------------------------------------------------------- helpers
def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T_START:7.1f}s] {msg}", flush=True)


def save(out: Path | None) -> None:
    if out:
        from ocrforge.config import atomic_write_text

        atomic_write_text(out, json.dumps(RESULTS, indent=1, ensure_ascii=False, default=str))


def cuda_time(fn, iters: int, warm: int = 3) -> list[float]:
    import torch

    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1000.0)
    return ts


def pct(v: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(v), q))


class GpuSampler:
    """nvidia-smi utilisation samples every 100 ms in a background process."""

    def __init__(self) -> None:
        self.proc = None
        self.lines: list[str] = []

    def __enter__(self):
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits",
                 "-lms", "100"], stdout=subprocess.PIPE, text=True)
            threading.Thread(target=self._read, daemon=True).start()
        except OSError:
            self.proc = None
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def __exit__(self, *exc) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=5)

    def summary(self) -> dict:
        u = [float(x.split(",")[0]) for x in self.lines if x and x.split(",")[0].strip().isdigit()]
        if not u:
            return {"samples": 0}
        m = [float(x.split(",")[1]) for x in self.lines if x.count(",") == 1
             and x.split(",")[1].strip().isdigit()]
        return {"samples": len(u), "util_mean": float(np.mean(u)), "util_p50": pct(u, 50),
                "util_max": float(np.max(u)), "mem_used_max_MiB": float(np.max(m)) if m else -1.0}


# ---------------------------------------------------------------------------- sections
def sec_peaks() -> None:
    import torch

    r = {}
    for name, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        a = torch.randn(8192, 8192, device="cuda", dtype=dt)
        b = torch.randn(8192, 8192, device="cuda", dtype=dt)
        ts = cuda_time(lambda a=a, b=b: a @ b, 10)
        r[f"matmul_{name}_tflops"] = 2 * 8192**3 / statistics.median(ts) / 1e12
    x = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ts = cuda_time(lambda x=x, y=y: y.copy_(x), 10)
    r["copy_GBps_read_plus_write"] = 2 * x.numel() / statistics.median(ts) / 1e9
    del x, y
    torch.cuda.empty_cache()
    RESULTS["peaks"] = r
    log(f"peaks {r}")


STAGE_CONFIGS = [  # name, precision, compile, graphs
    ("eager FP32", "fp32", False, False),
    ("eager FP16", "fp16", False, False),
    ("compiled FP16", "fp16", True, False),
    ("compiled + CUDA graphs FP16", "fp16", True, True),
    ("eager + CUDA graphs BF16", "bf16", False, True),
    ("eager + CUDA graphs FP16", "fp16", False, True),
]


def sec_stage(models, configs, det_batches, rec_batches, iters: int) -> None:
    import torch

    from ocrforge.config import RuntimeConfig
    from ocrforge.models.native import build_native
    from ocrforge.runtimes.torch import TorchRuntime

    out = RESULTS.setdefault("stage", {})
    for name, prec, comp, graphs in configs:
        for role, path, shape, batches in (("det", models.det, (3, 960, 960), det_batches),
                                           ("rec", models.rec, (3, 48, 320), rec_batches)):
            cfg = RuntimeConfig(backend="torch", device="cuda", torch_precision=prec,
                                compile=comp, cuda_graphs=graphs)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            rt = TorchRuntime(build_native(models.model_set, role, path), cfg, name=role)
            row = {"config": name, "role": role, "shape": list(shape)}
            for bs in batches:
                x = torch.randn((bs, *shape), device="cuda")
                t0 = time.perf_counter()
                rt.forward(x)
                torch.cuda.synchronize()
                first = time.perf_counter() - t0
                n = iters if bs == 1 else max(5, iters // 4)
                ts = cuda_time(lambda x=x, rt=rt: rt.forward(x), n)
                med = statistics.median(ts)
                row[f"b{bs}"] = {"first_call_s": first, "p50_ms": med * 1e3, "p95_ms": pct(ts, 95) * 1e3,
                                 "items_per_s": bs / med}
            row["peak_mem_GiB"] = torch.cuda.max_memory_allocated() / 2**30
            out[f"{role}|{name}"] = row
            best = max((row[f"b{b}"]["items_per_s"], b) for b in batches)
            log(f"stage {role:3s} {name:30s} b1 p50 {row['b1']['p50_ms']:.2f} ms  best {best[0]:.0f}/s "
                f"@b{best[1]}  first {row['b1']['first_call_s']:.1f}s  mem {row['peak_mem_GiB']:.2f} GiB")
            del rt
        save(ARGS.out)


def flops_bytes(models) -> dict:
    """FLOPs (torch flop counter) and minimal + activation bytes per det page / rec line."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from ocrforge.models.native import build_native

    r = {}
    for role, shape in (("det", (1, 3, 960, 960)), ("rec", (1, 3, 48, 320))):
        net = build_native(models.model_set, role, getattr(models, role))
        acts = [0]

        def hook(_m, _i, o, acts=acts):
            if isinstance(o, torch.Tensor):
                acts[0] += o.numel()

        hs = [m.register_forward_hook(hook) for m in net.modules() if len(list(m.children())) == 0]
        with FlopCounterMode(display=False) as fc, torch.no_grad():
            net(torch.zeros(shape))
        for h in hs:
            h.remove()
        params = sum(p.numel() for p in net.parameters())
        r[role] = {"gflop": fc.get_total_flops() / 1e9, "params_M": params / 1e6,
                   "leaf_output_elems_M": acts[0] / 1e6,
                   "fp16_bytes_min_MB": (int(np.prod(shape)) + params) * 2 / 1e6,
                   # every leaf output written once and read once, FP16
                   "fp16_bytes_activations_MB": acts[0] * 2 * 2 / 1e6}
    return r


def sec_e2e(engine_kw: dict, synth_dir: Path, dev_dir: Path | None, configs, n_latency: int,
            det_batch: int, rec_batch: int) -> None:
    import torch

    from ocrforge import OCR
    from ocrforge.evaluation.dataset import load_dataset
    from ocrforge.evaluation.eval import score_pages

    recs = load_dataset(synth_dir)
    files = [str(r.image) for r in recs]
    dev_recs = load_dataset(dev_dir) if dev_dir else []
    # the real-page mix: the dev set's images repeated and shuffled to >= ARGS.real_pages
    rng = np.random.default_rng(0)
    real = [str(r.image) for r in dev_recs] * (-(-ARGS.real_pages // max(len(dev_recs), 1)))
    rng.shuffle(real)
    out = RESULTS.setdefault("e2e", {})
    for name, prec, comp, graphs, buckets in configs:
        cuda = ARGS.device.startswith("cuda")
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        if buckets.startswith("engine-defaults"):  # what `OCR(device="cuda")` gives a user
            lim = DEFAULT_VARIANTS[buckets.removeprefix("engine-defaults")]
            eng = OCR(device=ARGS.device, **({} if cuda else {"runtime": "torch"}), **lim, **engine_kw)
        else:
            eng = OCR(runtime="torch", device=ARGS.device, torch_precision=prec, torch_compile=comp,
                      cuda_graphs=graphs, det_batch_size=det_batch, rec_batch_size=rec_batch,
                      **{"gpu.post_workers": 12, "gpu.decode": ARGS.gpu_decode}, **engine_kw)
        gp = eng.gpu_scheduler()  # with gpu.warmup="all" every bucket is captured here
        first = list(gp.run(files[:1]))
        first_page_s = time.perf_counter() - t0
        warm_s = time.perf_counter() - t0
        log(f"e2e {name}: engine start -> first page out {first_page_s:.2f}s")
        warm_pages = list(gp.run(files[: ARGS.warm_pages]))
        start_s = time.perf_counter() - t0
        log(f"e2e {name}: engine start + bucket warm-up {warm_s:.1f}s (warmup {gp.stats.warmup_s:.1f}s)")
        log(f"e2e {name}: engine start + warm-up on {len(warm_pages)} pages {start_s:.1f}s")
        row: dict = {"config": name, "precision": prec, "compile": comp, "cuda_graphs": graphs,
                     "start_to_first_page_s": first_page_s, "first_page_ok": bool(first and first[0].ok),
                     "page_buckets": buckets, "start_plus_warmup_s": start_s,
                     "warm_pages_ok": sum(not p.error for p in warm_pages),
                     "engine_start_plus_bucket_warmup_s": warm_s, "gpu_decode": gp.gpu_decode}
        out[name] = row  # saved as it fills: a run cut short keeps what was measured
        gp.stats.__init__()
        if ARGS.profile and not RESULTS.get("profiled") and cuda:  # the first config only
            RESULTS["profiled"] = name
            row["profile"] = profile_stages(gp, (real or files)[: ARGS.profile_pages])
            gp.stats.__init__()
        cpu0 = host_cpu_s()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        with GpuSampler() as smp:
            t0 = time.perf_counter()
            pages = []
            for pg in gp.run(files):
                pages.append(pg)
                if len(pages) % 250 == 0:
                    log(f"    {len(pages)} pages, {len(pages) / (time.perf_counter() - t0):.1f} pages/s so far")
            el = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = host_cpu_s() - cpu0
        st = gp.stats
        sc = score_pages(recs, pages)["overall"]
        k = min(ARGS.ort_pages, len(recs))
        row["synth_cer_first_n"] = {"n": k, "cer": score_pages(recs[:k], pages[:k])["overall"].get("cer")}
        row.update({
            "pages": len(pages), "errors": sum(bool(p.error) for p in pages),
            "lines_out": sum(len(p.lines) for p in pages), "seconds": el, "pages_per_s": len(pages) / el,
            "lines_per_s": sum(len(p.lines) for p in pages) / el,
            "host_cpu_s_per_page": cpu / len(pages),
            "host_cpu_user_sys_s": [ru1.ru_utime - ru0.ru_utime, ru1.ru_stime - ru0.ru_stime],
            "gpu_util": smp.summary(),
            "peak_mem_GiB": torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0,
            "stats": st.__dict__.copy(), "synth_cer": sc.get("cer"), "synth_det_f1": sc.get("det_f1"),
            "synth_line_acc": sc.get("line_acc"),
        })
        save(ARGS.out)
        log(f"e2e {name:34s} {row['pages_per_s']:.1f} pages/s ({row['lines_per_s']:.0f} lines/s) "
            f"CER {row['synth_cer']:.4f} util {row['gpu_util'].get('util_mean', -1):.0f}% "
            f"cpu/page {row['host_cpu_s_per_page'] * 1e3:.1f} ms mem {row['peak_mem_GiB']:.1f} GiB "
            f"start {start_s:.1f}s stats det {st.det_s:.2f}s crop {st.crop_s:.2f}s rec {st.rec_s:.2f}s "
            f"post(cpu) {st.post_s:.2f}s")
        if n_latency:
            lat = []
            for f in files[ARGS.warm_pages : ARGS.warm_pages + n_latency] or files[:n_latency]:
                t0 = time.perf_counter()
                list(gp.run([f]))
                lat.append(time.perf_counter() - t0)
            row["latency_ms_p50"] = pct(lat, 50) * 1e3
            row["latency_ms_p95"] = pct(lat, 95) * 1e3
            log(f"    single-page latency p50 {row['latency_ms_p50']:.1f} ms p95 {row['latency_ms_p95']:.1f} ms")
            save(ARGS.out)
        if dev_recs:
            for k in ("dev_pass1", "dev_pass2"):  # the same engine twice: must read the same
                t0 = time.perf_counter()
                dpages = list(gp.run([str(r.image) for r in dev_recs]))
                el = time.perf_counter() - t0
                dsc = score_pages(dev_recs, dpages)["overall"]
                row[k] = {"pages": len(dpages), "pages_per_s": len(dpages) / el, "cer": dsc.get("cer"),
                          "det_f1": dsc.get("det_f1"), "line_acc": dsc.get("line_acc"),
                          "lines": sum(len(p.lines) for p in dpages)}
                log(f"    {k} {len(dpages)} pages {row[k]['pages_per_s']:.1f} pages/s "
                    f"CER {row[k]['cer']:.4f} det_f1 {row[k]['det_f1']:.4f} lines {row[k]['lines']}")
                save(ARGS.out)
            if real:
                rm = row["real_mix"] = real_pass(gp, real, cuda, profile=True)
                save(ARGS.out)
                if ARGS.rotated:
                    row["rotated"] = rotated_dev(gp, dev_recs)
                log(f"    real-page mix {rm['pages']} pages {rm['pages_per_s']:.1f} pages/s "
                    f"util {rm['gpu_util'].get('util_mean', -1):.0f}% host {rm['host_cpu_ms_per_page']:.1f} ms/page "
                    f"peak {rm['peak_mem_GiB']:.2f} GiB reserved {rm['reserved_GiB']:.2f} GiB stats {rm['stats']}"
                    f"\n    graph calls {rm['graph_calls']}\n{fmt_profile(rm['profile'])}")
        out[name] = row
        save(ARGS.out)
        eng.close()
        del gp, eng
        _drop_engine_memory(cuda)


DEFAULT_VARIANTS: dict[str, dict] = {  # the default engine with one change (e2e "def*", variants)
    "": {}, "-1280": {"det_limit_side": 1280}, "-16mp": {"gpu.det_batch_megapixels": 16.0},
    "-noori": {"page_orientation": False}, "-hostdec": {"gpu.decode": False},
    "-decthr": {"gpu.decode_in_threads": True},
    "-nolayout": {"layout.enabled": False}, "-layout0": {"gpu.layout_processes": 0},
    "-layout8": {"gpu.layout_processes": 8},
    "-sw1": {"_switch_ms": 1.0},  # the interpreter's GIL switch interval at 1 ms (default 5)
    "-sw05": {"_switch_ms": 0.5},
    "-swi1": {"gpu.switch_interval_ms": 1.0},  # the same, set by the engine while it runs
    # the cyclic garbage collector: everything alive after the first page frozen (never
    # traversed again), or young generations collected 30x less often
    "-gcfreeze": {"_gc": "freeze"}, "-gcbig": {"_gc": (20000, 20, 10)},
    "-nogcfreeze": {"gpu.gc_freeze": False},  # the engine's own freeze off (its default: on)
    # fewer pages decoded ahead of the driver (default ~192: 64 decoding, 128 queued)
    "-ahead48": {"gpu.decode_ahead": 48}, "-ahead24": {"gpu.decode_ahead": 24},
    # cutting lines and draining recognition stop after this many ms of a driver pass
    "-slice3": {"gpu.step_budget_ms": 3.0}, "-slice10": {"gpu.step_budget_ms": 10.0},
    # driver processes (gpu.processes; the default picks from memory and CPUs)
    "-proc1": {"gpu.processes": 1}, "-proc2": {"gpu.processes": 2},
    "-proc3": {"gpu.processes": 3}, "-proc4": {"gpu.processes": 4},
    "-wall1": {"gpu.warmup": "all", "gpu.processes": 1},  # every bucket captured at start
    "-memtrace": {"_memtrace": True},
    "-nopw": {"_env": {"OCRFORGE_TORCH_POINTWISE": "0"}},  # 1x1 convolutions through cuDNN + bias add
    "-nofuse": {"_env": {"OCRFORGE_TORCH_FUSE": "0"}},  # biases, gates, GELUs in passes of their own
    # the layout rewrites left out: upsample copies in the neck, the max-pool, the transposed convs
    "-noviews": {"_env": {"OCRFORGE_TORCH_FUSE_SKIP": "DetNeck,Stem,DBHead"}},
    "-nostem": {"_env": {"OCRFORGE_TORCH_FUSE_SKIP": "Stem"}},  # the max-pool kernel kept
    # short lines padded to 160 / 224 px instead of the model's 320 (as the CPU path pads)
    "-rec160": {"rec.min_width": 160, "gpu.rec_widths": [
        160, 224, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1920, 2560, 3200]},
    "-expseg": {"_alloc": "expandable_segments:True"},  # the caching allocator's setting
    # the caching allocator held to 7 / 5 GiB (torch.cuda.set_per_process_memory_fraction):
    # what an 8 GB card leaves after the CUDA context, and that with room to spare
    "-cap7": {"_cap_gib": 7.0}, "-cap5": {"_cap_gib": 5.0},
    "-cap5mem": {"_cap_gib": 5.0, "gpu.max_inflight": 64, "gpu.decode_ahead": 48},
    "-infl32": {"gpu.max_inflight": 32},
    "-infl256": {"gpu.max_inflight": 256},
    # line crops held for recognition bounded (gpu.max_crop_megabytes): peak memory against rate
    "-crop256": {"gpu.max_crop_megabytes": 256.0}, "-crop1024": {"gpu.max_crop_megabytes": 1024.0},
    # recognition batches of 64 lines (x 1280 px) instead of 128: the rec graphs' pool
    "-rec64": {"rec.batch_size": 64},
    # 128 lines up to 640 px wide, fewer beyond (64 at 1280 px): rec64's widest calls only
    "-recpx64": {"rec.batch_pixels": 64 * 1280},
    # line crops in the network's dtype (as before 2026-12-06), not as grey levels (gpu.grey_crops)
    "-cropfloat": {"gpu.grey_crops": False},
    # the memory levers together: rec batches of 64, a crop budget of 256 MiB (grey crops)
    "-lowmem": {"rec.batch_size": 64, "gpu.max_crop_megabytes": 256.0},
    "-infl64": {"gpu.max_inflight": 64},
    # capture warm-ups on each runtime's capture stream (the default before 2026-12-06)
    "-warmcapture": {"_env": {"OCRFORGE_CAPTURE_WARM_STREAM": "capture"}},
    # how long a partial detection / recognition batch may wait (gpu.max_wait_ms); "nowait":
    # the behaviour before the setting (partial batches only when nothing else will fill them)
    "-wait30": {"gpu.max_wait_ms": 30.0}, "-wait300": {"gpu.max_wait_ms": 300.0},
    "-nowait": {"gpu.max_wait_ms": 1e9},
    # detection shapes on a grid of 256 / 128 px instead of the page buckets (less padding)
    "-step256": {"gpu.bucket_step": 256}, "-step128": {"gpu.bucket_step": 128},
    "-buckets": {"gpu.bucket_step": 0},  # the fraction page buckets (the default)
    # fewer pages in flight and decoded ahead: 64 and 48 (default 128 and ~192)
    "-mem": {"gpu.max_inflight": 64, "gpu.decode_ahead": 48},
    # step256 with the memory levers: 64 pages in flight, 48 decoded ahead (default 128 / ~192)
    "-step256-mem": {"gpu.bucket_step": 256, "gpu.max_inflight": 64, "gpu.decode_ahead": 48},
    "-pow2": {"gpu.rec_pow2_rows": True},  # recognition batches in power-of-two row shapes
    "-lesspad": {"gpu.bucket_step": 256, "gpu.rec_pow2_rows": True},  # both of the above
    "-noidle": {"gpu.launch_when_idle": False},  # partial batches not launched on an idle GPU
    # nvJPEG pages join the driver's work once decoded, not with the driver's stream waiting
    "-admitready": {"gpu.admit_when_decoded": True},
    # contour jobs taken oldest first only, as before 2026-12-07 (now: whichever finished)
    "-boxesfifo": {"_patch": "boxes_fifo"},
    # one CUDA-graph pool and capture stream for detection, recognition and orientation
    "-sharedpool": {"runtime.shared_graph_pool": True},  # the default since 2026-12-07
    "-poolper": {"runtime.shared_graph_pool": False},  # a graph pool per network, as before
    "-inlinecap": {"runtime.capture_in_background": False},  # captures on the driver thread
    "-bgcap": {"runtime.capture_in_background": True},  # captures by a worker thread
    # a shape captured after 8 / 32 eager uses instead of 1 (rare shapes stay eager)
    "-cap8": {"runtime.capture_after": 8}, "-cap32": {"runtime.capture_after": 32},
    "-warm1": {"_env": {"OCRFORGE_CAPTURE_WARMUPS": "1"}},  # one warm-up run before a capture
    "-lesspad-cap8": {"gpu.bucket_step": 256, "gpu.rec_pow2_rows": True, "runtime.capture_after": 8},
    # depthwise convolutions by PyTorch's kernel, not cuDNN (no per-shape execution plans)
    "-dwnative": {"_env": {"OCRFORGE_TORCH_DEPTHWISE": "native"}},
    # native depthwise kernels in eager calls only (first uses), cuDNN's in the CUDA graphs
    "-dwfirst": {"_env": {"OCRFORGE_TORCH_DEPTHWISE": "first_use"}},
    # the same with captures (and so cuDNN's plans) on a worker thread, off the driver's path
    "-dwfirst-bgcap": {"_env": {"OCRFORGE_TORCH_DEPTHWISE": "first_use"},
                       "runtime.capture_in_background": True},
    "-lesspad-dwnative": {"gpu.bucket_step": 256, "gpu.rec_pow2_rows": True,
                          "_env": {"OCRFORGE_TORCH_DEPTHWISE": "native"}},
    "-head32": {"_env": {"OCRFORGE_TORCH_FP16_SAFE": "0"}},  # recognition's head in FP32 (before)
    # torch.compile (inductor) with symbolic batch and spatial sizes: one compilation per network
    "-compdyn": {"runtime.compile": True, "_env": {"OCRFORGE_TORCH_COMPILE_DYNAMIC": "1"}},
    "-lesspad-compdyn": {"gpu.bucket_step": 256, "gpu.rec_pow2_rows": True, "runtime.compile": True,
                         "_env": {"OCRFORGE_TORCH_COMPILE_DYNAMIC": "1"}},
}


def _boxes_fifo():
    """DriverLoop.next_boxes as before 2026-12-07: only the oldest contour job, once done."""
    from ocrforge.scheduling.gpu_loop import DriverLoop

    new = DriverLoop.next_boxes

    def oldest_first(self):
        if self.post and (self.post[0].done() or (not self.rec_out and not self.n_waiting)):
            return self.post.popleft()
        return None

    DriverLoop.next_boxes = oldest_first
    return lambda: setattr(DriverLoop, "next_boxes", new)


PATCHES = {"boxes_fifo": _boxes_fifo}  # a variant's "_patch": code of an earlier tree, restored after


def sec_variants(engine_kw: dict, dev_dir: Path, names: list[str], n_pages: int) -> None:
    """The default engine with one setting changed each (DEFAULT_VARIANTS): start, the real-page
    mix (dev images repeated, shuffled) and the dev set's CER, in few seconds per variant."""
    from ocrforge.evaluation.dataset import load_dataset

    recs = load_dataset(dev_dir)
    real = [str(r.image) for r in recs] * (-(-n_pages // len(recs)))
    np.random.default_rng(1).shuffle(real)
    out = RESULTS.setdefault("variants", {})
    runs = {n: names.count(n) for n in names}
    seen: dict[str, int] = {}
    for name in names:
        key = name or "default"
        seen[key] = seen.get(key, 0) + 1
        if runs[name] > 1 and seen[key] == 1:  # a repeated variant: rows key#1, key#2, ...
            out.pop(key, None)
        env = dict(os.environ)
        patch = DEFAULT_VARIANTS[name].get("_patch")
        undo = PATCHES[patch]() if patch else None
        try:
            one_variant(engine_kw, name, recs, real[:n_pages], out)
        except Exception as e:  # noqa: BLE001 - a failing variant must not end the call
            os.environ.clear()
            os.environ.update(env)
            out[name or "default"] = {"change": DEFAULT_VARIANTS[name], "error": repr(e)[:2000]}
            save(ARGS.out)
            log(f"variant {name or 'default'} failed: {e!r}"[:3000])
        finally:
            _cap_allocator(None, ARGS.device.startswith("cuda"))  # a failed row's cap too
            if undo is not None:
                undo()
            if runs[name] > 1 and key in out:
                out[f"{key}#{seen[key]}"] = out.pop(key)
                save(ARGS.out)


def one_variant(engine_kw: dict, name: str, recs: list, real: list, out: dict) -> None:
    import torch

    from ocrforge import OCR
    from ocrforge.evaluation.eval import score_pages

    n_pages = len(real)
    cuda = ARGS.device.startswith("cuda")
    _drop_engine_memory(cuda)  # whatever ran before: this row's reserved memory is its own
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    change = dict(DEFAULT_VARIANTS[name])
    change.pop("_patch", None)  # applied by sec_variants
    trace = MemoryTrace() if change.pop("_memtrace", False) and cuda else None
    alloc = change.pop("_alloc", None)
    _cap_allocator(change.pop("_cap_gib", None), cuda)
    env = change.pop("_env", {})
    gc_how = change.pop("_gc", None)  # applied after the first page
    saved_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    if alloc and cuda:
        torch.cuda.memory._set_allocator_settings(alloc)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(change.pop("_switch_ms", switch * 1e3) / 1e3)
    t0 = time.perf_counter()
    eng = OCR(device=ARGS.device, **({} if cuda else {"runtime": "torch"}), **change, **engine_kw)
    pool = eng.gpu_pool() if cuda else None  # several driver processes: read_many's path
    gp = None if pool is not None else eng.gpu_scheduler()
    read = eng.read_many if pool is not None else gp.run
    list(read(real[:1]))
    first_page_s = time.perf_counter() - t0
    gc_undo = _gc_change(gc_how)
    row: dict = {"change": DEFAULT_VARIANTS[name], "first_page_s": first_page_s,
                 "processes": len(pool.engines) if pool is not None else 1}
    dpages = list(read([str(r.image) for r in recs]))  # also the warm-up of the shapes
    sc = score_pages(recs, dpages)["overall"]
    row.update(dev_cer=sc.get("cer"), dev_cer_aligned=sc.get("cer_aligned"), dev_det_f1=sc.get("det_f1"))
    if pool is not None:
        for k in ("first_pass", "second_pass"):
            row[k] = pool_pass(read, real[:n_pages])
        row.update(pool_pass(read, real[:n_pages]))
        out[name or "default"] = row
        save(ARGS.out)
        log(f"variant {name or 'default'} ({row['processes']} processes): "
            f"{row['pages_per_s']:.1f} pages/s (pass 1 {row['first_pass']['pages_per_s']:.1f}, "
            f"pass 2 {row['second_pass']['pages_per_s']:.1f}) util "
            f"{row['gpu_util'].get('util_mean', -1):.0f}% host {row['host_cpu_ms_per_page']:.1f} "
            f"ms/page GPU mem used {row['gpu_util'].get('mem_used_max_MiB', -1):.0f} MiB first "
            f"page {row['first_page_s']:.1f}s dev CER {row['dev_cer'] or -1:.4f} (aligned "
            f"{row['dev_cer_aligned'] or -1:.4f}) det F1 {row['dev_det_f1'] or -1:.4f}")
        eng.close()
        sys.setswitchinterval(switch)
        gc_undo()
        _restore_env(saved_env)
        _cap_allocator(None, cuda)
        return
    # pass 1 still captures the CUDA graphs of shapes met for the second time; pass 2 (the
    # same pages again) is the steady rate
    row["first_pass"] = real_pass(gp, real[:n_pages], cuda, profile=False)
    # pass 2 still meets a few shapes for the second time (batch sizes vary with timing); its
    # driver passes are traced (no thread sampler runs in it): what the device waits for
    gp.trace = [] if ARGS.timeline else None
    row["second_pass"] = real_pass(gp, real[:n_pages], cuda, profile=False)
    if gp.trace:
        row["second_pass"]["timeline"] = save_timeline(gp, name or "default")
    gp.trace = None
    row.update(real_pass(gp, real[:n_pages], cuda, profile=trace is None))
    if ARGS.clean_passes:
        row["clean_passes"] = [clean_pass(gp, real[:n_pages]) for _ in range(ARGS.clean_passes)]
        row["clean_pages_per_s"] = float(np.median(row["clean_passes"]))
    if ARGS.pyspy and (name or "default").lstrip("-") in ARGS.pyspy.split(","):
        from driver_pyspy import PySpy

        raw = (ARGS.out or Path("/tmp/x")).with_name(f"pyspy_{name or 'default'}.txt")
        gil = raw.with_name(f"pyspy_gil_{name or 'default'}.txt")
        # a 4th pass: each thread's CPU time by function, and who holds the interpreter lock
        with PySpy(raw) as spy, PySpy(gil, gil=True) as spy_gil:
            k = sum(1 for _ in gp.run(real[:n_pages]))
        row["pyspy"] = spy.summary(k)
        row["pyspy_gil"] = spy_gil.summary(k)
    row["shape_uses"] = shape_uses(gp)
    if cuda:
        row["reserved_by_stream"] = reserved_by_stream(gp)
    extra = ""
    if trace is not None:
        row["memory_trace"] = trace.report()
        extra += fmt_memory(row["memory_trace"]) + "\n"
    elif cuda and ARGS.kernel_pages:
        row["kernels"] = stage_kernels(gp, real[: ARGS.kernel_pages])
        extra += fmt_stage_kernels(row["kernels"]) + "\n"
    out[name or "default"] = row
    save(ARGS.out)
    log(f"variant {name or 'default'} {DEFAULT_VARIANTS[name]}: {row['pages_per_s']:.1f} pages/s "
        f"(pass 1 {row['first_pass']['pages_per_s']:.1f}, pass 2 "
        f"{row['second_pass']['pages_per_s']:.1f}) util "
        f"{row['gpu_util'].get('util_mean', -1):.0f}% host {row['host_cpu_ms_per_page']:.1f} ms/page (pools {row.get('pool_cpu_ms_per_page')}) "
        f"peak {row['peak_mem_GiB']:.2f} GiB first page {row['first_page_s']:.1f}s dev CER "
        f"{row['dev_cer'] or -1:.4f} (aligned {row['dev_cer_aligned'] or -1:.4f}) det F1 "
        f"{row['dev_det_f1'] or -1:.4f} reserved {row['reserved_GiB']:.2f} GiB\n    reserved by "
        f"stream (MiB) {row.get('reserved_by_stream')}\n    GIL wait pass 2 {row['second_pass']['gil_wait']} pass 3 "
        f"{row['gil_wait']}\n    in flight, mean ms a page {inflight_ms(row['stats'])}\n"
        f"    driver timeline, pass 2 {json.dumps(row['second_pass'].get('timeline'))}\n"
        f"    stats {row['stats']}\n    graph calls "
        f"{row['graph_calls']} (pass 1 {row['first_pass']['graph_calls']}, pass 2 "
        f"{row['second_pass']['graph_calls']})\n{extra}{fmt_profile(row.get('profile', {}))}\n{fmt_pyspy(row.get('pyspy', {}))}\n{fmt_pyspy(row.get('pyspy_gil', {}))}")
    eng.close()
    sys.setswitchinterval(switch)
    gc_undo()
    _restore_env(saved_env)
    del gp, eng
    _cap_allocator(None, cuda)
    if alloc and cuda:
        torch.cuda.memory._set_allocator_settings(alloc.replace("True", "False"))


def _cap_allocator(gib: float | None, cuda: bool) -> None:
    """Hold this process's caching allocator to ``gib`` GiB (None: the whole card), as on a
    smaller card; the CUDA context and libraries' own allocations are outside it."""
    if not cuda:
        return
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(1.0 if gib is None else min(1.0, gib * 2**30 / total))


def _drop_engine_memory(cuda: bool) -> None:
    """Closed engines' cached blocks back to the driver, so a row's reserved memory is its
    own. The cache used to be emptied at the start of a row without a collection first: the
    closed engine's cycles (its CUDA graphs among them) were collected later,
    at the next engine's first run, and their graph pool (~3 GiB, 33 MiB of it still allocated:
    the capture stream's cuBLAS workspace) stayed reserved and was counted in the rows after the
    first of a call (H100, 2026-12-07, benchmarks/gpu_engine_release.py)."""
    import gc

    gc.collect()
    if cuda:
        import torch

        torch.cuda.empty_cache()


def _gc_change(how):
    """Apply a variant's garbage-collector change ("freeze", or thresholds); returns its undo."""
    import gc

    if how is None:
        return lambda: None
    old = gc.get_threshold()
    if how == "freeze":
        gc.collect()
        gc.freeze()
    else:
        gc.set_threshold(*how)

    def undo() -> None:
        gc.unfreeze()
        gc.set_threshold(*old)

    return undo


def save_timeline(gp, name: str) -> dict:
    """The traced driver passes as timeline_NAME.npy beside --out, and their summary."""
    from driver_timeline import summarise

    rows = np.asarray(gp.trace, dtype=np.float64)
    rows[:, 0] -= rows[0, 0]  # seconds into the pass (float32 keeps microseconds)
    if ARGS.out is not None:
        np.save(ARGS.out.parent / f"timeline_{name}.npy", rows.astype(np.float32))
    return summarise(rows, gp.max_inflight)


def inflight_ms(stats: dict) -> dict:
    """SchedulerStats.inflight_phase_s as mean milliseconds a page, with their sum."""
    n = max(1, stats.get("pages", 0))
    ph = {k: round(v / n * 1e3, 1) for k, v in stats.get("inflight_phase_s", {}).items()}
    return {**ph, "total": round(sum(ph.values()), 1)}


def shape_uses(gp) -> dict:
    """Per network: calls per input shape over the variant's life (first page, dev set, three
    passes), and how many shapes a capture-after-K policy would capture (uses > K)."""
    out = {}
    for net, rt in (("det", gp.det), ("rec", gp.rec), ("orient", gp.orient_runtime())):
        uses = getattr(rt, "uses", None)
        if not uses:
            continue
        out[net] = {"shapes": len(uses), "calls": sum(uses.values()),
                    "captured_if_after": {k: sum(n > k for n in uses.values())
                                          for k in (1, 2, 4, 8, 16, 32, 64)},
                    "top": [[list(s), n] for s, n in uses.most_common(12)],
                    "rarest": [[list(s), n] for s, n in uses.most_common()[-6:]]}
    return out


def _restore_env(saved: dict) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def clean_pass(gp, pages: list) -> float:
    """Pages/s of one pass with nothing else running in the process: no GPU sampler, GIL
    probe, thread sampler or driver trace (pass 2 and 3 have some of them: each takes the
    interpreter lock from time to time)."""
    t1 = time.perf_counter()
    n = sum(1 for _ in gp.run(pages))
    return n / (time.perf_counter() - t1)


def real_pass(gp, pages: list, cuda: bool, profile: bool) -> dict:
    """One timed pass of the scheduler over pages: rate, host CPU, GPU use, memory, stage
    clocks and (profile) where the scheduler's Python threads spent their time."""
    import torch
    from thread_sampler import GilProbe, ThreadSampler

    gp.stats.__init__()
    probe = GilProbe()
    idle = probe.baseline()
    rts = {"det": gp.det, "rec": gp.rec, "orient": gp.orient_runtime()}
    before = {k: dict(getattr(rt, "counts", {})) for k, rt in rts.items() if rt is not None}
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    cpu0 = host_cpu_s()
    pools0 = pool_cpu_s(gp)
    with GpuSampler() as smp, probe, ThreadSampler(("ocrforge-gpu", "MainThread")) if profile else \
            contextlib.nullcontext() as ts:
        t1 = time.perf_counter()
        n = sum(1 for _ in gp.run(pages))
        el = time.perf_counter() - t1
    pools1 = pool_cpu_s(gp)
    row = {"pages": n, "pages_per_s": n / el, "host_cpu_ms_per_page": (host_cpu_s() - cpu0) / n * 1e3,
           # CPU ms per page in each worker-process pool (DB box extraction, layout)
           "pool_cpu_ms_per_page": {k: round((pools1[k] - pools0.get(k, 0.0)) / n * 1e3, 2)
                                    for k in pools1},
           "gpu_util": smp.summary(), "stats": copy.deepcopy(gp.stats.__dict__),
           # how late a 2 ms sleep ends: the GIL wait after a blocking call (idle: before)
           "gil_wait": {"idle": idle, "run": probe.summary()},
           "peak_mem_GiB": torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0,
           "reserved_GiB": torch.cuda.memory_reserved() / 2**30 if cuda else 0.0,
           "peak_reserved_GiB": torch.cuda.max_memory_reserved() / 2**30 if cuda else 0.0}
    # network calls in the pass: eager (first use of a shape), graph captures (second use) and
    # their seconds, replays
    row["graph_calls"] = {k: {c: round(rts[k].counts[c] - v, 3) for c, v in b.items()}
                          for k, b in before.items()}
    if profile:
        row["profile"] = ts.summary()
    return row


def pool_pass(read, pages: list) -> dict:
    """One timed pass through an engine's driver processes: rate, host CPU of the whole process
    tree, GPU use and the GPU's memory in use (every process on it, nvidia-smi)."""
    cpu0 = host_cpu_s()
    with GpuSampler() as smp:
        t1 = time.perf_counter()
        n = sum(1 for _ in read(pages))
        el = time.perf_counter() - t1
    return {"pages": n, "pages_per_s": n / el, "host_cpu_ms_per_page": (host_cpu_s() - cpu0) / n * 1e3,
            "gpu_util": smp.summary(), "peak_mem_GiB": smp.summary().get("mem_used_max_MiB", -1) / 1024}


def fmt_pyspy(s: dict) -> str:
    from driver_pyspy import fmt

    return fmt(s) if "error" not in s else f"py-spy: {s['error']}"


def fmt_profile(p: dict) -> str:
    from thread_sampler import fmt

    return fmt(p)


def pool_cpu_s(gp) -> dict:
    """CPU seconds so far of the scheduler's worker processes, per pool (db, layout)."""
    import psutil

    out = {}
    for name, owner in (("db", getattr(gp, "_dbpool", None)), ("layout", getattr(gp, "layout_pool", None))):
        procs = getattr(getattr(owner, "pool", None), "_processes", None) or {}
        total = 0.0
        for pid in list(procs):
            try:
                t = psutil.Process(pid).cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        out[name] = total
    return out


def host_cpu_s() -> float:
    """CPU seconds of this process and its live children (the DB worker processes)."""
    import psutil

    me = psutil.Process()
    t = me.cpu_times()
    total = t.user + t.system
    for c in me.children(recursive=True):
        try:
            ct = c.cpu_times()
            total += ct.user + ct.system
        except psutil.Error:
            pass
    return total


def rotated_dev(gp, dev_recs) -> dict:
    """The dev pages turned by 90/180/270 (as arrays): CER against the upright labels (page
    orientation must turn them back) and how many came back with the right rotation."""
    import cv2

    from ocrforge.evaluation.eval import score_pages

    codes = {90: cv2.ROTATE_90_CLOCKWISE, 180: cv2.ROTATE_180, 270: cv2.ROTATE_90_COUNTERCLOCKWISE}
    out = {}
    for angle, code in codes.items():
        imgs = [cv2.rotate(cv2.imread(str(r.image)), code) for r in dev_recs]
        pages = list(gp.run(imgs))
        sc = score_pages(dev_recs, pages)["overall"]
        out[angle] = {"cer": sc.get("cer"), "det_f1": sc.get("det_f1"),
                      "right_rotation": sum(p.rotation == angle for p in pages), "pages": len(pages)}
        log(f"    rotated {angle}: CER {sc.get('cer'):.4f} rotation right {out[angle]['right_rotation']}/{len(pages)}")
    return out


def profile_stages(gp, files: list[str]) -> dict:
    """Where the time goes: torch.profiler over a run of the scheduler, CUDA and CPU time per
    op family (top 25 by device time), plus the scheduler's own stage clocks."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    list(gp.run(files[:8]))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        n = sum(1 for _ in gp.run(files))
        torch.cuda.synchronize()
        el = time.perf_counter() - t0
    rows = []
    for ev in sorted(prof.key_averages(), key=lambda e: -getattr(e, "device_time_total", 0))[:25]:
        rows.append({"op": ev.key, "calls": ev.count,
                     "device_ms": getattr(ev, "device_time_total", 0) / 1e3,
                     "cpu_ms": ev.cpu_time_total / 1e3})
    res = {"pages": n, "seconds": el, "top_ops": rows, "stats": copy.deepcopy(gp.stats.__dict__)}
    log(f"profile: {n} pages in {el:.2f}s; top device ops: " +
        ", ".join(f"{r['op'][:40]} {r['device_ms']:.0f}ms" for r in rows[:8]))
    return res


def sec_ort(engine_kw: dict, synth_dir: Path, dev_dir: Path | None, n: int) -> None:
    from ocrforge import OCR
    from ocrforge.evaluation.dataset import load_dataset
    from ocrforge.evaluation.eval import score_pages

    eng = OCR(intra_op_threads=16, **engine_kw)
    r = {}
    for label, recs in (("synth", load_dataset(synth_dir)[:n]),
                        ("dev", load_dataset(dev_dir)[: ARGS.ort_dev_pages] if dev_dir else [])):
        if not recs:
            continue
        eng.read(str(recs[0].image))  # warm-up
        lat = []
        pages = []
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        for rec in recs:
            t1 = time.perf_counter()
            pages.append(eng.read(str(rec.image)))
            lat.append(time.perf_counter() - t1)
        el = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        sc = score_pages(recs, pages)["overall"]
        r[label] = {"pages": len(recs), "pages_per_s": len(recs) / el, "latency_ms_p50": pct(lat, 50) * 1e3,
                    "latency_ms_p95": pct(lat, 95) * 1e3, "cer": sc.get("cer"), "det_f1": sc.get("det_f1"),
                    "host_cpu_s_per_page": cpu / len(recs)}
        log(f"ort-cpu16 {label}: {r[label]}")
    RESULTS["ort_cpu16"] = r
    save(ARGS.out)


WARM_CODE = """
import time, torch, sys
t0 = time.perf_counter()
from ocrforge.config import RuntimeConfig
from ocrforge.models.native import build_native
from ocrforge.models.registry import resolve_models
from ocrforge.runtimes.torch import TorchRuntime
m = resolve_models('ppocrv6-small', sys.argv[1] or None)
rt = TorchRuntime(build_native(m.model_set, 'det', m.det), RuntimeConfig(backend='torch', device='cuda',
                  torch_precision='fp16', compile=True, cuda_graphs=True))
rt.forward(torch.zeros(1, 3, 960, 960, device='cuda')); torch.cuda.synchronize()
print('START_TO_FIRST_OUTPUT_S', time.perf_counter() - t0)
"""


def sec_warm(model_dir: str) -> None:
    r = {}
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = f"/tmp/inductor-bench-{os.getpid()}"  # empty: first run is cold
    for k in ("cold", "warm"):
        p = subprocess.run([sys.executable, "-c", WARM_CODE, model_dir], env=env, capture_output=True,
                           text=True, timeout=300)
        line = [x for x in p.stdout.splitlines() if x.startswith("START_TO_FIRST")]
        r[k] = float(line[0].split()[1]) if line else p.stderr[-500:]
        log(f"compiled det fp16 b1 960x960, {k} start (new process) -> first output: {r[k]}")
    RESULTS["compile_cache_start_s"] = r
    save(ARGS.out)


# ---------------------------------------------------------------------------- main
def main() -> None:
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--font", required=True)
    ap.add_argument("--dev", default=None, help="labeled dev set folder (labels.jsonl)")
    ap.add_argument("--pages", type=int, default=1000)
    ap.add_argument("--synth-dir", default="/tmp/ocrforge-synth")
    ap.add_argument("--sections", default="peaks,e2e,stage,ort,warm")
    ap.add_argument("--stage-configs", default="all")
    ap.add_argument("--e2e-configs", default="fp16g,bf16g,fp32g,fp32e")
    ap.add_argument("--det-batch", type=int, default=16)
    ap.add_argument("--rec-batch", type=int, default=128)
    ap.add_argument("--ort-pages", type=int, default=20)
    ap.add_argument("--ort-dev-pages", type=int, default=1000)
    ap.add_argument("--latency-pages", type=int, default=50)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--warm-pages", type=int, default=64)
    ap.add_argument("--det-batches", default="1,8,32", help="stage section, det at 960x960")
    ap.add_argument("--rec-batches", default="1,64,256,1024", help="stage section, rec at 48x320")
    ap.add_argument("--budget-s", type=float, default=540, help="skip sections started after this")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--device", default="cuda", help="cpu only for a smoke test of the e2e section")
    ap.add_argument("--real-pages", type=int, default=1000, help="dev-set images repeated+shuffled")
    ap.add_argument("--gpu-decode", type=int, default=1, help="nvJPEG decode of plain JPEGs (1/0)")
    ap.add_argument("--profile", type=int, default=1, help="torch.profiler stage table (1/0)")
    ap.add_argument("--profile-pages", type=int, default=64)
    ap.add_argument("--rotated", type=int, default=1, help="dev pages turned 90/180/270 (1/0)")
    ap.add_argument("--variants", default="default,16mp,noori,hostdec,nolayout",
                    help="variants section: the default engine with one change each")
    ap.add_argument("--variant-pages", type=int, default=504, help="real-mix pages per variant")
    ap.add_argument("--clean-passes", type=int, default=3,
                    help="uninstrumented passes after pass 3 per variant (their median is the rate)")
    ap.add_argument("--pyspy", default="",
                    help="variants (by name, 'default' too) given a 4th pass under py-spy: each "
                         "thread's CPU time by function (needs the py-spy binary)")
    ap.add_argument("--timeline", type=int, default=1,
                    help="variants: trace the driver's passes in pass 2 (driver_timeline.py)")
    ap.add_argument("--kernel-pages", type=int, default=0,
                    help="variants: one more pass of this many pages under torch.profiler "
                         "(GPU kernel time per stage, gpu_probe.stage_kernels); 0: none")
    ARGS = ap.parse_args()

    import torch

    from ocrforge.models.registry import resolve_models

    models = resolve_models("ppocrv6-small", ARGS.model_dir)
    RESULTS["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    RESULTS["torch"] = torch.__version__
    RESULTS["cpu_count"] = os.cpu_count()
    RESULTS["argv"] = sys.argv
    log(f"device {RESULTS['device']} torch {torch.__version__} cpus {os.cpu_count()}")
    RESULTS["flops_bytes"] = flops_bytes(models)
    log(f"flops/bytes {RESULTS['flops_bytes']}")
    secs = ARGS.sections.split(",")
    synth_dir = Path(ARGS.synth_dir)
    if any(s in secs for s in ("e2e", "ort")) and not (synth_dir / "labels.jsonl").exists():
        t0 = time.perf_counter()
        synth_pages(synth_dir, ARGS.pages, ARGS.font)
        log(f"rendered {ARGS.pages} synthetic pages in {time.perf_counter() - t0:.1f}s")
    if (synth_dir / "images").is_dir():
        RESULTS["synth_sha256"] = pages_digest(synth_dir)
        log(f"synthetic pages sha256 {RESULTS['synth_sha256']}")
    engine_kw = {"model_dir": ARGS.model_dir} if ARGS.model_dir else {}
    dev = Path(ARGS.dev) if ARGS.dev else None
    e2e_all = {
        "fp16g": ("eager + CUDA graphs FP16", "fp16", False, True, "default"),
        "bf16g": ("eager + CUDA graphs BF16", "bf16", False, True, "default"),
        "fp32g": ("eager + CUDA graphs FP32", "fp32", False, True, "default"),
        "fp32e": ("eager FP32 (no graphs)", "fp32", False, False, "default"),
        "fp16e": ("eager FP16 (no graphs)", "fp16", False, False, "default"),
        "fp16c": ("compiled + CUDA graphs FP16", "fp16", True, True, "default"),
        "fp32x": ("eager + CUDA graphs FP32, exact page shapes", "fp32", False, True, "exact"),
        "def": ("default engine OCR(device='cuda')", "fp16", False, True, "engine-defaults"),
        "def1280": ("default engine, det.limit_side=1280", "fp16", False, True, "engine-defaults-1280"),
    }
    for s in secs:
        if time.perf_counter() - T_START > ARGS.budget_s:
            log(f"budget reached: skipping section {s}")
            RESULTS.setdefault("skipped", []).append(s)
            continue
        try:
            if s == "peaks":
                sec_peaks()
            elif s == "stage":
                alias = {"fp16g": "eager + CUDA graphs FP16", "fp16cg": "compiled + CUDA graphs FP16"}
                names = [alias.get(n, n) for n in ARGS.stage_configs.split(";")]
                cf = STAGE_CONFIGS if ARGS.stage_configs == "all" else [
                    c for c in STAGE_CONFIGS if c[0] in names]
                sec_stage(models, cf, tuple(int(b) for b in ARGS.det_batches.split(",")),
                          tuple(int(b) for b in ARGS.rec_batches.split(",")), ARGS.iters)
            elif s == "e2e":
                for k in ARGS.e2e_configs.split(","):  # one failing config leaves the others measured
                    try:
                        sec_e2e(engine_kw, synth_dir, dev, [e2e_all[k]], ARGS.latency_pages, ARGS.det_batch,
                                ARGS.rec_batch)
                    except Exception as e:
                        import traceback

                        traceback.print_exc()
                        RESULTS.setdefault("failed", {})[f"e2e:{k}"] = f"{type(e).__name__}: {e}"
                        log(f"e2e config {k} FAILED: {e}")
                    save(ARGS.out)
            elif s == "ort":
                sec_ort(engine_kw, synth_dir, dev, ARGS.ort_pages)
            elif s == "warm":
                sec_warm(ARGS.model_dir or "")
            elif s == "variants":
                sec_variants(engine_kw, dev, ["" if v == "default" else "-" + v
                                              for v in ARGS.variants.split(",")], ARGS.variant_pages)
        except Exception as e:  # keep going: report what failed
            import traceback

            traceback.print_exc()
            RESULTS.setdefault("failed", {})[s] = f"{type(e).__name__}: {e}"
            log(f"section {s} FAILED: {e}")
        save(ARGS.out)
    log("done")


def markdown(paths: list[str]) -> str:
    """Tables for docs/BENCHMARKS.md from one or more result JSON files (merged in order)."""
    R: dict = {}
    for p in paths:
        d = json.loads(Path(p).read_text(encoding="utf-8"))
        for k, v in d.items():
            if isinstance(v, dict) and isinstance(R.get(k), dict):
                R[k].update(v)
            else:
                R[k] = v
    out = [f"Device: {R.get('device')}, torch {R.get('torch')}, {R.get('cpu_count')} CPU cores.", ""]
    if "peaks" in R:
        pk = R["peaks"]
        out += [f"Measured ceilings: matmul BF16 {pk['matmul_bf16_tflops']:.0f} TFLOP/s, FP16 "
                f"{pk['matmul_fp16_tflops']:.0f} TFLOP/s; device copy {pk['copy_GBps_read_plus_write']:.0f} GB/s "
                "(read + write).", ""]
    if "stage" in R:
        out += ["| network (input) | config | batch-1 p50 / p95 ms | best throughput | first call s | peak mem GiB |",
                "|---|---|---|---|---|---|"]
        for row in R["stage"].values():
            bs = [k for k in row if k.startswith("b") and k[1:].isdigit()]
            best = max(bs, key=lambda k: row[k]["items_per_s"])
            unit = "pages/s" if row["role"] == "det" else "lines/s"
            shp = "x".join(str(v) for v in row["shape"][1:])
            out.append(f"| {row['role']} ({shp}) | {row['config']} | {row['b1']['p50_ms']:.2f} / "
                       f"{row['b1']['p95_ms']:.2f} | {row[best]['items_per_s']:.0f} {unit} (batch {best[1:]}) | "
                       f"{row['b1']['first_call_s']:.1f} | {row['peak_mem_GiB']:.2f} |")
        out.append("")
    if "e2e" in R:
        out += ["| end to end (GpuScheduler) | pages/s | lines/s | 1-page latency p50 / p95 ms | GPU util mean | "
                "host CPU ms/page | peak GPU GiB | CER synth | CER dev | dev pages/s |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for row in R["e2e"].values():
            dv = row.get("dev", {})
            lat = (f"{row['latency_ms_p50']:.1f} / {row['latency_ms_p95']:.1f}"
                   if "latency_ms_p50" in row else "-")
            out.append(f"| {row['config']} | {row['pages_per_s']:.1f} | {row['lines_per_s']:.0f} | {lat} | "
                       f"{row['gpu_util'].get('util_mean', float('nan')):.0f} % | "
                       f"{row['host_cpu_s_per_page'] * 1e3:.1f} | {row['peak_mem_GiB']:.1f} | "
                       f"{row['synth_cer'] * 100:.2f} % | "
                       f"{dv.get('cer', float('nan')) * 100:.2f} % | {dv.get('pages_per_s', float('nan')):.1f} |")
        out.append("")
    if "ort_cpu16" in R:
        out += ["| ONNX Runtime CPU, 16 threads (ocrforge engine, read() per page) | pages | pages/s | "
                "latency p50 ms | CER | host CPU ms/page |", "|---|---|---|---|---|---|"]
        for k, v in R["ort_cpu16"].items():
            out.append(f"| {k} | {v['pages']} | {v['pages_per_s']:.2f} | {v['latency_ms_p50']:.0f} | "
                       f"{v['cer'] * 100:.2f} % | {v['host_cpu_s_per_page'] * 1e3:.0f} |")
        out.append("")
    return "\n".join(out)


ARGS: argparse.Namespace

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "markdown":
        print(markdown(sys.argv[2:]))
    else:
        main()
