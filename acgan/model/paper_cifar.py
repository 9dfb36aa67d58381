"""The AC-GAN paper's CIFAR-10 networks (`--arch acgan_cifar`), from the same policy-aware blocks.

Source: Odena, Olah and Shlens, "Conditional Image Synthesis with Auxiliary Classifier GANs", ICML 2017
(arXiv:1610.09585v4), Appendix A, the CIFAR-10 hyper-parameter table:

    G: z (100) + one-hot class (10) = 110 inputs
       Linear 384 (x 4 x 4), no BN, ReLU
       Transposed conv 5x5, stride 2, 192 maps, BN, ReLU          4x4 -> 8x8
       Transposed conv 5x5, stride 2,  96 maps, BN, ReLU          8x8 -> 16x16
       Transposed conv 5x5, stride 2,   3 maps, no BN, tanh       16x16 -> 32x32
    D: Conv 3x3 stride 2,  16 maps, no BN, dropout 0.5, leaky ReLU 0.2
       Conv 3x3 stride 1,  32 maps, BN,    dropout 0.5, leaky ReLU
       Conv 3x3 stride 2,  64 maps, BN,    dropout 0.5, leaky ReLU
       Conv 3x3 stride 1, 128 maps, BN,    dropout 0.5, leaky ReLU
       Conv 3x3 stride 2, 256 maps, BN,    dropout 0.5, leaky ReLU
       Conv 3x3 stride 1, 512 maps, BN,    dropout 0.5, leaky ReLU
       Linear 11: one sigmoid unit (real/fake) and a softmax over the 10 classes
    Init normal(0, 0.02), biases 0; Adam 2e-4, beta1 0.5; batch 100; leaky ReLU slope 0.2.

Provenance, honestly: the text of the paper found here was the ICLR-submission version, whose only
table is the ImageNet one; its discriminator rows are the ones above (3x3, 16-512, strides 2/1, BN from
the second layer, dropout 0.5, leaky ReLU 0.2) and a public PyTorch reimplementation's CIFAR-10
discriminator flattens the same stack's 4x4x512 map into the two linear heads. The CIFAR-10 generator
rows (a linear layer into 4x4x384, then 192, 96 and 3 maps by 5x5 stride-2 transposed convolutions,
tanh) are the v4 CIFAR-10 table as the issue summarised it; they were not re-read from the paper here.

Where this departs from the table, and why:

- Images: the step's contract is float32 images in [0, 1] (real images are scaled by 1/255), so G's
  tanh output is mapped to [0, 1] as (tanh + 1) / 2, in float32. That is an affine change of units, not
  of the model: D sees the same range for real and fake images.
- The two linear outputs are kept as this project's two heads (D head: 1 logit; Q head: K class
  logits, both float32), on the shared trunk of the six convolutions (features: the flattened 4x4x512
  map, plus the minibatch spread below). The paper's "Soft-Sigmoid" over 11 units is the same thing:
  sigmoid on one, softmax on ten.
- Upsampling (UPSAMPLE = "resize"): each of G's stride-2 transposed convolutions is a nearest-neighbour
  2x upsampling followed by a stride-1 convolution with the table's maps (Odena, Dumoulin and Olah,
  "Deconvolution and Checkerboard Artifacts", Distill 2016). Measured on swatches (width 0.5, batch 64,
  this 2-core CPU): with the table's 5x5 stride-2 transposed convolutions every sample at step 500 was
  the same pixel-scale checkerboard in every row and column (z ignored); with 4x4 ones, and with dropout
  off, still at step 300; with resize-convolutions the columns differed from step 125 and no checkerboard
  showed (those runs used 5x5 kernels after the upsampling). UPSAMPLE = "transpose" builds the table's.
- G's kernels (G_KERNEL = 3): 3x3 convolutions after each upsampling, not 5x5. A resize-convolution
  with 5x5 kernels costs 4x the table's transposed one (25 taps per output pixel against 25/4); 3x3
  costs 1.4x, so G does 2.8x fewer multiply-adds. Measured on swatches (width 0.5, batch 64, all else
  equal, this 2-core CPU, each run sharing it with one other training run, but not the two with each
  other, so the time ratio is indicative): about 450 against about 800 ms per step, and judge accuracy
  57% against 59% at step 500: more steps in the same minutes for about the same quality per step.
- Dropout (DROPOUT = 0.0): the table's 0.5 after every D layer is off. In the same short runs Q's
  accuracy on real batches averaged 0.25 after 150 steps with it and 0.58-0.66 after 150-200 steps
  without it; the paper trained 50,000 steps, a budget of minutes has no room for that regulariser.
- Spectral normalisation in D (SPECTRAL_NORM = True): every convolution of the trunk is a
  blocks.SpectralConv2D (its kernel divided by its largest singular value, Miyato et al. 2018) and D has
  no batch norm; with SPECTRAL_NORM = False the trunk is the table's: conv -> BN (float32 island) ->
  leaky ReLU (-> dropout), BN from the second layer. Measured on swatches with JAX on an H200 (eight runs
  of 2.8 minutes sharing the GPU, width 0.5, batch 64; docs/colour-history.md): with the table's
  batch norm every row of the grid was one image by step ~3,600 whatever else changed; with spectral
  normalisation the samples within each row still differed at step ~2,500 (colour varied with z,
  texture with the class). With both changes below, in 20 CPU-minutes on swatches (the README's colour
  table): judge accuracy 70.5% and mean per-class distance 69, against 48.0% and 105 with batch norm,
  and rows whose samples differ.
- D's maps (D_MAPS = 64, 64, 128, 128, 256, 256, the table's 16, 32, 64, 128, 256, 512): wider early,
  narrower last. At width 0.5 the table's D begins with 8 maps, which drew textures as pixel noise; a
  first layer costs little (its maps are large but its input has 3 channels) while the last 4x4 layer
  costs most. Measured on swatches (width 0.5, batch 64, 12-minute runs two at a time, judge on 1,000
  samples): mean per-class distance 94 / 69 / 76 at steps 500 / 1,000 / 1,500 against the table's maps'
  97 / 81 / 80 (accuracy 34 / 54 / 56% against 38 / 58 / 58%), and about as many steps in the same
  minutes (1,573); with 256 maps in the last layer too, 1,412 steps and no better per step.
- Adam's beta_1 is 0 for all three optimizers (acgan.step.common.ADAM_BETA_1; the table's 0.5), as the
  spectral-norm GANs train (Miyato et al. 2018). Measured as above with the wider D, both runs judged on
  a running average of G's weights (a trial-only patch): 27 / 56 / 68% and per-class 113 / 72 / 62 at
  steps 500 / 1,000 / 1,500, against 42 / 55 / 61% and 98 / 73 / 75 with 0.5: slower at first, ahead
  by step 1,500. With both (docs/colour-history.md, 20 CPU-minutes, 10,000 samples): judge accuracy 76.6%,
  distance 21.5, per-class 45.5, against 70.5%, 45.9 and 69.1 before them.
- Q learns classes from real images only (acgan.step.common.Q_LEARNS_FROM_FAKES): the fake batch's
  class loss moves G alone. In the paper Q also learns to name G's labels on G's images, so G and Q can
  agree on a class code that the real images do not have (the last stop's all-or-nothing per-class
  accuracies: half the classes drawn as another class's texture). With spectral normalisation it was
  the better of the two at step 2,000 on the H200 (judge accuracy 54% against 39%, per-class distance
  96 against 120, 1,000 samples).
- A projection discriminator (PROJECTION = True; Miyato and Koyama, "cGANs with Projection
  Discriminator", ICLR 2018): D's real/fake logit gains a class term, <embed(label), features> (the
  real label for a real image, the label G was asked for on a fake; blocks.class_projection, a float32
  island). In the table D is unconditional and the classes reach G through Q alone; on swatches G then
  learned to draw what its own Q accepts, not the class: at 2,500 and 8,000 steps Q named G's class on
  98.3% and 99.9% of its samples where the judge named it on 71.0% and 85.5% (Q accepted all of G's
  "checks", which the judge called stripes or dots). With the projection D itself rejects a fake that
  does not look like the real images of its label. Measured on swatches (seed 0, width 0.5, judge on
  1,000 samples at steps 1,000 / 2,000 / 3,000): accuracy 42.7 / 79.6 / 87.7% and mean per-class
  distance 87.4 / 47.0 / 35.4, against 53.4 / 74.4 / 80.4% and 69.5 / 53.5 / 39.7 without it; with the
  projection but without Q's class loss on G, 57.1 / 76.6 / 84.8% (Q's loss on G is kept). 20-minute
  runs per policy: docs/colour-history.md. The reference model's D head stays unconditional.
- The class term reads the trunk's last map summed over its 4x4 positions (blocks.SumOverPositions,
  the paper's global sum pooling; 129 numbers per image at width 0.5), not the flattened map (2,064):
  one embedding row per class scores a texture wherever it shows, where the flattened map needed one
  weight per class, position and channel. Measured on swatches (stop 33, a 2-core Intel Xeon with AMX,
  float32, XLA off, 20 minutes, seeds 1 and 2; the flattened preset at the same seeds in a pair of its
  own; 10,000 samples; accuracy / distance / per-class distance): 92.1% / 6.8 / 17.2 and 88.0% / 14.7 / 25.1 against
  83.2% / 13.0 / 21.6 and 84.6% / 8.4 / 19.8, checks drawn 80% / 38% against 1% / 35%, at the same
  cost per step (5,259-5,287 steps against 5,077-5,083); over seeds 0-3, 91.5% / 9.0 / 18.9, and
  per policy at seeds 0-2 in the README's colour table. Old acgan_cifar checkpoints do not load into
  this head (acgan.evaluate and --resume say so). Tried instead, not kept: one more G layer at full
  resolution (a 3x3 convolution of 24 maps at 32x32 before the RGB one; 18% slower steps, 82.0% / 82.1%).
- Tried beside the projection, not kept (stop 32; "How the preset got here" in docs/colour-history.md): a mismatch
  term in D's loss (Reed et al. 2016: real images under a wrong label scored as fake), which sharpens
  D's class term (acgan.evaluate's "D's class margin") and sped up the judge's accuracy (80% at step
  1,000 against 54%), but at weight 1 made every row of the grid one image by step 1,250, and at weight
  0.3 still drew no checks; two D updates per G update (behind per G step, and each step slower). The
  mismatch term at 0.3 beside the pooled class term (stop 34, seed 1, 20 minutes): float32 89.7% / 11.8 /
  28.9 and mixed_float16 91.5% / 20.0 / 48.9 against the preset's 92.1% / 6.8 / 17.2 and 85.0% / 15.2 /
  24.8, each row of the grids one to three images (z mostly ignored): not kept.
- G learns its classes from D's projection alone (acgan.step.common.G_LEARNS_FROM_Q): the paper's class
  term for G, Q's class loss on G's images, is measured but moves nothing. Kept beside the projection,
  it pulled G towards what Q names most surely: in 20-minute runs on swatches Q named G's class on 99.7%
  of its samples, while each row of stripes was one angle and one colour (per-class distance 117, waves
  146) and checks were blobs the judge named 3% of the time. Without it (float32, XLA off, 10,000
  samples): judge accuracy 92.4% / 89.9% at seeds 0 / 1 against 84.8% at seed 0, mean per-class distance
  31.5 / 30.6 against 49.6, checks 87% / 56% against 3%; a G backward pass fewer per step, so 27% more
  steps in the same minutes (3,978 against 3,125, two pairs of runs one after the
  other). (An earlier 3,000-step trial, before two TF-step
  fixes, had found it level: 84.8% against 87.7% on 1,000 samples.)
- The learning rates fall linearly to zero over the last quarter of a run (acgan.step.common.
  LEARNING_RATE_DECAY; of --steps/--epochs, or of the session's --minutes; the table's are constant).
  At constant rates the judge's readings of 20-minute runs on swatches swung by up to 11 points between
  readings 500 steps apart from step 2,500 on, so a run's final numbers were decided by the step it
  stopped at (float32 at seed 0 read 84.3% and 81.7% at steps 3,000 and 3,500, then 92.4% at its last;
  mixed_bfloat16 read 91.2% at 3,500, then ended at 84.2%). Over the last quarter (20 minutes, seeds 0
  and 1, 10,000 samples; accuracy / distance / per-class distance): float32 87.6% / 17.7 / 31.4,
  mixed_bfloat16 88.4% / 15.5 / 29.0, mixed_float16 80.5% / 16.7 / 37.7 (0.64-0.66x float32's steps on
  this CPU), against 91.2%, 84.1% and 82.6% at constant rates: about level over the six runs, and the
  readings from the decay's start to the end ranged over 1.2-7.7 points, against up to 11. Over the last
  half, float32 began its decay at step 1,430, before it had learned the classes (77.7%). Seeds 2 and 3
  (stop 28, another session): float32 81.3% / 81.9%, mixed_bfloat16 89.1% / 83.0%; over four seeds 84.6%
  against 87.2%, a seed-to-seed spread of 3.6 points, with checks the class G fails (0-31% in every run
  of stop 28). Averaging G's weights (an EMA, as StyleGAN and BigGAN sample) instead trailed G's
  own weights on every reading from step 2,000 on (by 1.6-13.2 points, per-class distance 50-78 against
  29-42), with recomputed batch-norm statistics too; not kept. docs/colour-history.md has all runs.
- D sees every image augmented (acgan.step.common.DIFF_AUGMENT; DiffAugment, Zhao et al., NeurIPS 2020,
  its CIFAR-10 policy: colour, translation by up to 4 pixels, cutout of a 16x16 square), real and fake,
  in D's pass and in G's, differentiably, so G learns through it; not in the table. In 20 CPU-minutes D
  sees each of swatches' 20,000 train images about 13 times. Measured on swatches (20-minute runs, XLA
  as the benchmark chose, four seeds for float32, two for the mixed policies, 10,000 samples, judge 0;
  accuracy / distance / per-class distance): float32 83.8% / 13.4 / 25.1 against the preset's 84.6% /
  18.0 / 32.1 over the same four seeds (the per-class distance lower at every seed: 28.4, 24.6, 21.4,
  25.9 against 32.5, 30.3, 28.9, 36.7); mixed_bfloat16 87.8% / 11.3 / 26.1 (seeds 0 and 1) against 88.4% /
  15.5 / 29.0; mixed_float16 79.4% / 28.4 / 43.5 against 80.5% / 16.7 / 37.7, its seed 0 ending on a
  jump (per-class 40.4 at step 2,500, 50.8 at its last, 2,860). The classification accuracy score did
  not move (23-33% either way). The step costs about what it did (4,000-4,106 float32 steps in 20
  minutes; not timed side by side). docs/colour-history.md has the runs.
- Minibatch standard deviation (MINIBATCH_STDDEV): one channel after D's last layer holding how
  much each group of 4 consecutive images varies (blocks.MinibatchStddev; batches come in class order,
  so a group mostly shares a class). Not in the table. Measured on swatches at the paper's learning
  rates (width 0.5, batch 64), with the table's batch-norm D: without it every row of the grid was one
  colour by step 692; with it (and batches in class order) the columns' patterns still differed at step
  1,500 (their colours were alike by then), and by step 2,600 (a 20-minute run) every row was one
  image. It delays the collapse; spectral normalisation (above) is what stopped it.
- The paper's activation noise in D (Salimans et al.) is left out, as in the reference model.
- The real/fake loss stays the table's nonsaturating binary cross-entropy (acgan.step.common.
  ADVERSARIAL_LOSS); `--loss hinge` trains with the spectral-norm and projection discriminators' hinge
  loss instead. Measured on swatches (stops 38 and 39, `--steps 5000`, float32, XLA on, a 2-core AMD
  EPYC, seeds 1, 2, 3 and 5, 10,000 samples): judge accuracy 90.5% against 89.9% (+0.5 +- 1.6 points
  paired), overall distance 8.3 against 11.4, per-class 21.8 against 23.0, checks drawn 72% against
  63% of the time, at one seed in four fewer (38% against 82%). Level on accuracy; not yet tried under
  the mixed policies. docs/colour-history.md has the runs.
- `width` scales every channel count (multiples of 8, at least 8); the side may be any multiple of 8
  (the first map is side/8); G's noise is 100-d as in the paper (the reference model's is 62).
- Learning rates: the table's Adam 2e-4 for D, G and Q (acgan.step.common.LEARNING_RATES;
  the reference model keeps 2e-4 / 1e-3 / 1e-3). Measured on swatches: with G and Q at 1e-3, or at
  5e-4, every row of the grid became one image (z ignored) within 750-1,300 steps, minibatch spread or
  not; at 2e-4 the classes come slower and the rows stay varied for longer (above). The batch stays
  --batch (64 by default, the table's is 100).
"""
import keras
from keras import layers

from acgan.model import blocks

NOISE_DIM = 100
DROPOUT = 0.0  # the table's 0.5 slowed Q's learning 2-3x in short runs (see the module docstring)
G_MAPS = (384, 192, 96)
D_MAPS = (64, 64, 128, 128, 256, 256)  # the table's: 16, 32, 64, 128, 256, 512 (see the docstring)
G_KERNEL = 3  # the table's 5: after a 2x upsampling, 3x3 costs 2.8x fewer multiply-adds (see the docstring)
UPSAMPLE = "resize"  # "transpose": the table's stride-2 transposed convolutions; "resize": upsample + conv
D_KERNEL = 3
MINIBATCH_STDDEV = True
SPECTRAL_NORM = True  # D's convolutions spectrally normalised, no batch norm in D (see the docstring)
PROJECTION = True  # D's real/fake logit has a class term <embed(label), features> (see the docstring)


def build_generator(image_shape, num_classes, width=1.0, noise_dim=NOISE_DIM):
    side, _, depth = image_shape
    base = side // 8
    c384, c192, c96 = (blocks.channels(n, width) for n in G_MAPS)
    z = keras.Input((noise_dim,), name="z")
    labels = keras.Input((), dtype="int32", name="labels")
    x = layers.Concatenate(name="z_label")([z, keras.ops.one_hot(labels, num_classes)])
    x = blocks.relu(blocks.dense(x, base * base * c384, "g_fc1"), "g_relu1")
    x = layers.Reshape((base, base, c384), name="g_reshape")(x)
    up = blocks.upsample_conv if UPSAMPLE == "resize" else blocks.conv_transpose
    for i, maps in enumerate((c192, c96), start=2):
        x = up(x, maps, f"g_deconv{i - 1}", kernel=G_KERNEL)
        x = blocks.relu(blocks.batch_norm(x, f"g_bn{i}"), f"g_relu{i}")
    x = up(x, depth, "g_deconv_out", kernel=G_KERNEL)
    images = blocks.float32_tanh_to_unit(x, "g_image")
    return keras.Model([z, labels], images, name="generator")


def build_trunk(image_shape, width=1.0):
    images = keras.Input(image_shape, name="images")
    x = images
    for i, maps in enumerate(D_MAPS, start=1):
        x = blocks.conv(x, blocks.channels(maps, width), f"d_conv{i}", kernel=D_KERNEL, strides=2 if i % 2 else 1,
                        spectral_norm=SPECTRAL_NORM)
        if i > 1 and not SPECTRAL_NORM:
            x = blocks.batch_norm(x, f"d_bn{i}")
        x = blocks.leaky_relu(x, f"d_lrelu{i}")
        if DROPOUT:
            x = blocks.dropout(x, DROPOUT, f"d_dropout{i}")
    if MINIBATCH_STDDEV:
        x = blocks.minibatch_stddev(x, "d_minibatch_stddev")
    features = layers.Flatten(name="d_flatten")(x)
    return keras.Model(images, features, name="trunk")


def map_positions(trunk):
    """How many positions the trunk's flattened features come from (4 x 4 for 32x32 images)."""
    _, height, width, _ = trunk.get_layer("d_flatten").input.shape
    return height * width


def build_d_head(feature_dim, num_classes, positions=1):
    """D's real/fake logit from the trunk's features (a flattened map of `positions` positions) and the
    images' labels (real labels for real images, the labels G was asked for on fakes): a float32 dense
    logit, plus with PROJECTION the class term <embed(label), features summed over the positions>
    (blocks.class_projection)."""
    features = keras.Input((feature_dim,), name="features")
    labels = keras.Input((), dtype="int32", name="labels")
    logit = blocks.float32_logits(features, 1, "d_logit")
    if PROJECTION:
        logit = layers.Add(dtype="float32", name="d_logit_projected")(
            [logit, blocks.class_projection(features, labels, num_classes, "d_projection", positions)])
    return keras.Model([features, labels], logit, name="d_head")


def build_q_head(feature_dim, num_classes):
    features = keras.Input((feature_dim,), name="features")
    return keras.Model(features, blocks.float32_logits(features, num_classes, "q_logits"), name="q_head")
