/* numpy's np.random.default_rng(seed), bit for bit: SeedSequence turns the
 * seed into four 64-bit words, they seed PCG64 (a 128-bit LCG with the XSL-RR
 * output), and standard normals come from numpy's 256-level ziggurat. Each
 * step follows numpy's bit_generator.pyx, _pcg64.pyx, pcg64.h and
 * distributions.c. The ziggurat tables are numpy's (ziggurat_constants.h),
 * copied as data: recomputed in double they miss numpy's by an ulp here and
 * there, and one ulp is enough to change a sample. */
#include "core/internal.h"

#include <math.h>

/* numpy rounds every product before the sum that uses it; a fused
 * multiply-add (the wedge's height (f0 - f1) * u + f1 as one fma) would
 * change last bits. GCC never fuses in -std=c11 mode and warns at this
 * pragma, so it is clang's alone. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- 128-bit unsigned arithmetic, mod 2^128 ---------------------------- */

/* Plain C11 has no 128-bit integer, so a value is a (hi, lo) pair. */
typedef struct u128 {
    uint64_t hi, lo;
} u128;

static u128 add128(u128 a, u128 b)
{
    u128 sum = {a.hi + b.hi, a.lo + b.lo};
    sum.hi += sum.lo < a.lo; /* carry out of the low word */
    return sum;
}

/* The full 128-bit product of two 64-bit words, from 32-bit halves:
 * a*b = ah*bh 2^64 + (ah*bl + al*bh) 2^32 + al*bl. `mid` gathers the 2^32
 * terms that land in the low word; it cannot overflow, since
 * (2^32-1) + (2^32-1) + (2^32-1)^2 = 2^64 - 1. */
static u128 mul64x64(uint64_t a, uint64_t b)
{
    uint64_t al = (uint32_t)a, ah = a >> 32, bl = (uint32_t)b, bh = b >> 32;
    uint64_t ll = al * bl, hl = ah * bl, lh = al * bh, hh = ah * bh;
    uint64_t mid = (ll >> 32) + (uint32_t)hl + lh;
    return (u128){hh + (hl >> 32) + (mid >> 32), (mid << 32) | (uint32_t)ll};
}

/* a*b mod 2^128: the a.hi*b.hi term is a multiple of 2^128 and drops out,
 * and the cross terms only reach the high word. */
static u128 mul128(u128 a, u128 b)
{
    u128 product = mul64x64(a.lo, b.lo);
    product.hi += a.hi * b.lo + a.lo * b.hi;
    return product;
}

/* ---- PCG64 ------------------------------------------------------------- */

/* The LCG step: state = state * PCG_MULT + inc (mod 2^128). */
static const u128 PCG_MULT = {0x2360ED051FC65DA4ULL, 0x4385DF649FCCF645ULL};

static void step(tg_pcg64 *g)
{
    u128 state = {g->state_hi, g->state_lo}, inc = {g->inc_hi, g->inc_lo};
    state = add128(mul128(state, PCG_MULT), inc);
    g->state_hi = state.hi;
    g->state_lo = state.lo;
}

/* One 64-bit output: step, then XSL-RR: xor the halves of the new state and
 * rotate right by its top 6 bits. */
static uint64_t next64(tg_pcg64 *g)
{
    step(g);
    uint64_t folded = g->state_hi ^ g->state_lo;
    unsigned rot = (unsigned)(g->state_hi >> 58);
    return (folded >> rot) | (folded << ((64 - rot) & 63));
}

/* Generator.random(): the top 53 bits as a multiple of 2^-53 in [0, 1). */
static double next_double(tg_pcg64 *g)
{
    return (double)(next64(g) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- SeedSequence ------------------------------------------------------ */

/* numpy's SeedSequence (O'Neill's seed_seq_fe): the entropy is hashed into a
 * pool of four 32-bit words, the words are mixed with one another, and the
 * output words are hashes of the pool taken in turn. All arithmetic is
 * uint32, mod 2^32. */
#define POOL_SIZE  4
#define INIT_A     0x43b0d7e5U
#define MULT_A     0x931e8875U
#define INIT_B     0x8b51f9ddU
#define MULT_B     0x58f38dedU
#define MIX_MULT_L 0xca01f9ddU
#define MIX_MULT_R 0x4973f715U
#define XSHIFT     16

/* One hashing step with the running constant h: h becomes h * MULT_A, and
 * value becomes v = (value ^ h_old) * h_new, then v ^ (v >> 16). */
static uint32_t hashmix(uint32_t value, uint32_t *hash_const)
{
    value ^= *hash_const;
    *hash_const *= MULT_A;
    value *= *hash_const;
    return value ^ (value >> XSHIFT);
}

/* Folds y into x: r = MIX_MULT_L * x - MIX_MULT_R * y, then r ^ (r >> 16). */
static uint32_t mix(uint32_t x, uint32_t y)
{
    uint32_t result = MIX_MULT_L * x - MIX_MULT_R * y;
    return result ^ (result >> XSHIFT);
}

/* The pool for an integer seed. numpy splits the seed into 32-bit words,
 * least significant first, and hashes them into the pool, zeros past the end
 * of the entropy. It drops leading zero words, but the zeros that pad the
 * pool hash the same, so the two words of a uint64 seed can go in as they
 * are. The pool then mixes each word into every other one. */
static void seed_pool(uint64_t seed, uint32_t pool[POOL_SIZE])
{
    uint32_t entropy[POOL_SIZE] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t hash_const = INIT_A;
    for (int i = 0; i < POOL_SIZE; i++)
        pool[i] = hashmix(entropy[i], &hash_const);
    for (int src = 0; src < POOL_SIZE; src++)
        for (int dst = 0; dst < POOL_SIZE; dst++)
            if (src != dst)
                pool[dst] = mix(pool[dst], hashmix(pool[src], &hash_const));
}

/* generate_state(4, np.uint64): eight 32-bit output words, paired little
 * endian (word 2k is the low half of 64-bit word k). */
static void generate_state(const uint32_t pool[POOL_SIZE], uint64_t words[4])
{
    uint32_t hash_const = INIT_B;
    for (int i = 0; i < 8; i++) {
        uint32_t value = pool[i % POOL_SIZE] ^ hash_const;
        hash_const *= MULT_B;
        value *= hash_const;
        value ^= value >> XSHIFT;
        if (i % 2 == 0)
            words[i / 2] = value;
        else
            words[i / 2] |= (uint64_t)value << 32;
    }
}

/* PCG's srandom: the increment must be odd, so inc = (seq << 1) | 1; then
 * state = 0, step, state += initstate, step. numpy passes words 0,1 as
 * initstate (high, low) and words 2,3 as seq (high, low). */
void tg_pcg64_seed(tg_pcg64 *g, uint64_t seed)
{
    if (!g) {
        tg__error("pcg64_seed: generator is NULL");
        return;
    }
    uint32_t pool[POOL_SIZE];
    uint64_t words[4];
    seed_pool(seed, pool);
    generate_state(pool, words);
    g->inc_hi = (words[2] << 1) | (words[3] >> 63);
    g->inc_lo = (words[3] << 1) | 1;
    g->state_hi = g->state_lo = 0;
    step(g);
    u128 state =
        add128((u128){g->state_hi, g->state_lo}, (u128){words[0], words[1]});
    g->state_hi = state.hi;
    g->state_lo = state.lo;
    step(g);
}

double tg_pcg64_uniform(tg_pcg64 *g)
{
    if (!g) {
        tg__error("pcg64_uniform: generator is NULL");
        return NAN;
    }
    return next_double(g);
}

/* ---- Standard normals: numpy's ziggurat -------------------------------- */

/* Under f(x) = exp(-x^2/2), x >= 0, sit 256 layers of equal area
 * v = 0.0049286732339746. Layer i in 1..255 is the rectangle [0, x_i) x
 * [f(x_i), f(x_{i-1})), with x_1 < ... < x_255 = R (x_1 at the peak, where
 * f(x_0) reads as 1). Layer 0 is the base [0, R) x [0, f(R)) together with
 * the tail beyond R; x_0 = v / f(R) is its width were it a rectangle.
 *
 * numpy stores wi[i] = x_i / 2^52 (so that a 52-bit integer times wi[i] is
 * uniform on [0, x_i)), fi[i] = f(x_i) and ki[i] ~ 2^52 x_{i-1} / x_i (the
 * part of layer i that lies wholly under the curve; ki[0] ~ 2^52 R / x_0).
 * We keep x_i itself, which reads better, and scale by 2^-52 where numpy
 * reads wi: the scaling by a power of two is exact, so x_i * 0x1p-52 is
 * numpy's wi[i] to the bit. */
#define ZIGGURAT_R     3.6541528853610087963519472518
#define ZIGGURAT_INV_R 0.27366123732975827203338247596

/* x_i, numpy's wi_double[i] * 2^52. */
static const double layer_x[256] = {
    3.910757959524912,   0.21524189598488003, 0.2861745917920715,
    0.33573751921442435, 0.3751213328783798,  0.40838913461199033,
    0.4375184022078708,  0.4636343367908815,  0.4874439661392353,
    0.509423329602091,   0.5299097206615574,  0.5491517023271645,
    0.5673382570538182,  0.5846167661063788,  0.6011046177559921,
    0.6168969900077509,  0.6320722363860606,  0.6466957148949931,
    0.6608225742444191,  0.6744998228372932,  0.6877678927957878,
    0.7006618411068143,  0.7132122851909752,  0.7254461409099988,
    0.7373872114342949,  0.7490566620178146,  0.7604734064301074,
    0.7716544242245675,  0.7826150233072324,  0.7933690588406226,
    0.8039291169899705,  0.8143066701352146,  0.8245122087522915,
    0.8345553540863815,  0.8444449549091533,  0.8541891710081632,
    0.8637955455533082,  0.87327106808886,    0.882622229585165,
    0.891855070732941,   0.9009752244612214,  0.9099879534967181,
    0.9188981836495902,  0.9277105334019996,  0.9364293402865748,
    0.945058684468165,   0.9536024098810856,  0.9620641432230401,
    0.970447311064224,   0.9787551552942242,  0.986990747099062,
    0.9951569996350904,  1.0032566795446725,  1.011292417439995,
    1.0192667174654835,  1.027181966035645,   1.03504043983344,
    1.0428443131441483,  1.0505956645909291,  1.0582964833306743,
    1.0659486747621219,  1.0735540657924356,  1.0811144097034033,
    1.0886313906539793,  1.0961066278520208,  1.103541679424639,
    1.110938046013575,   1.1182971741193444,  1.1256204592155326,
    1.1329092486525332,  1.1401648443681507,  1.1473885054208484,
    1.1545814503599272,  1.161744859445611,   1.1688798767308328,
    1.1759876120154515,  1.1830691426826863,  1.1901255154266914,
    1.1971577478794408,  1.2041668301443809,  1.2111537262436987,
    1.218119375485481,   1.2250646937565302,  1.2319905747461355,
    1.2388978911056867,  1.2457874955486268,  1.2526602218948968,
    1.2595168860637138,  1.266358287018229,   1.273185207665356,
    1.2799984157138176,  1.2867986644932434,  1.2935866937369476,
    1.300363230330837,   1.307128989030731,   1.3138846731502203,
    1.3206309752210559,  1.3273685776279256,  1.3340981532193599,
    1.3408203658964037,  1.347535871180587,   1.3542453167626347,
    1.3609493430332826,  1.3676485835974759,  1.374343665773166,
    1.381035211075855,   1.3877238356899757,  1.3944101509281406,
    1.4010947636792506,  1.4077782768463984,  1.4144612897754707,
    1.4211443986753085,  1.4278281970302555,  1.4345132760058918,
    1.4412002248487237,  1.4478896312805758,  1.45458208188841,
    1.4612781625102753,  1.4679784586180793,  1.4746835556978553,
    1.481394039628187,   1.4881104970574472,  1.4948335157804935,
    1.5015636851154637,  1.5083015962813113,  1.5150478427767144,
    1.5218030207609978,  1.528567729437712,   1.5353425714415139,
    1.5421281532290017,  1.5489250854741732,  1.5557339834691761,
    1.5625554675310445,  1.5693901634151233,  1.576238702735906,
    1.583101723396029,   1.5899798700241905,  1.5968737944227878,
    1.6037841560260941,  1.6107116223698297,  1.617656869573015,
    1.624620582833034,   1.6316034569348727,  1.638606196775547,
    1.6456295179047817,  1.6526741470830553,  1.659740822858182,
    1.666830296161665,   1.6739433309261247,  1.6810807047251735,
    1.688243209437195,   1.6954316519345614,  1.702646854799923,
    1.7098896570713016,  1.7171609150178229,  1.7244615029480448,
    1.7317923140529632,  1.7391542612859117,  1.7465482782817225,
    1.7539753203176716,  1.7614363653189102,  1.7689324149112684,
    1.7764644955245228,  1.7840336595494415,  1.7916409865521625,
    1.7992875845497203,  1.8069745913508208,  1.8147031759662826,
    1.8224745400938858,  1.830289919682757,   1.8381505865828067,
    1.8460578502851857,  1.8540130597602023,  1.8620176053996746,
    1.8700729210712674,  1.8781804862929965,  1.8863418285367834,
    1.8945585256707052,  1.9028322085504297,  1.9111645637712535,
    1.9195573365931882,  1.9280123340526658,  1.9365314282756947,
    1.9451165600086784,  1.9537697423846467,  1.962493064944363,
    1.9712886979336592,  1.9801588969004766,  1.989106007617438,
    1.9981324713584196,  2.0072408305605287,  2.016433734906204,
    2.025713947863854,   2.035084353729619,   2.0445479652175313,
    2.054107931650652,   2.063767547811732,   2.0735302635187427,
    2.083399693998304,   2.0933796311387916,  2.1034740557148766,
    2.1136871506866526,  2.1240233156895227,  2.134487182846016,
    2.145083634047888,   2.1558178198767366,  2.1666951803543077,
    2.1777214677402923,  2.1889027716263603,  2.200245546611276,
    2.2117566428841604,  2.22344334009251,    2.235313384929921,
    2.247375032947389,   2.259637095173787,   2.2721089902283813,
    2.284800802724492,   2.2977233489028634,  2.310888250601372,
    2.3243080188711325,  2.3379961487965284,  2.3519672273791445,
    2.366237056717291,   2.3808227951720857,  2.3957431197819274,
    2.4110184139011195,  2.4266709849371466,  2.442725318200364,
    2.459208374334705,   2.476149939670523,   2.4935830412710467,
    2.511544441626694,   2.530075232159854,   2.549221550324783,
    2.5690354526818435,  2.589575986708286,   2.610910518488823,
    2.6331163936315822,  2.656283037576743,   2.6805146432857447,
    2.705933656123062,   2.7326853590440114,  2.7609440052799865,
    2.7909211740019275,  2.8228773968264433,  2.857138730873225,
    2.8941210536134125,  2.934366867208888,   2.9786032798818436,
    3.027837791769594,   3.0835261320021434,  3.147889289518001,
    3.224575052047802,   3.320244733839826,   3.4492782985614316,
    3.654152885361009};
/* f(x_i), numpy's fi_double. */
static const double layer_f[256] = {1.0,
                                    0.9771017012676716,
                                    0.9598790918001067,
                                    0.9451989534422996,
                                    0.9320600759592305,
                                    0.919991505039347,
                                    0.9087264400521309,
                                    0.8980959218983434,
                                    0.8879846607558334,
                                    0.8783096558089174,
                                    0.869008688036857,
                                    0.8600336211963315,
                                    0.851346258458678,
                                    0.8429156531122042,
                                    0.8347162929868834,
                                    0.8267268339462214,
                                    0.8189291916037024,
                                    0.8113078743126563,
                                    0.8038494831709643,
                                    0.796542330422959,
                                    0.7893761435660246,
                                    0.7823418326548025,
                                    0.7754313049811872,
                                    0.7686373157984863,
                                    0.7619533468367954,
                                    0.7553735065070961,
                                    0.7488924472191568,
                                    0.742505296340151,
                                    0.7362075981268627,
                                    0.7299952645614762,
                                    0.7238645334686302,
                                    0.717811932630722,
                                    0.7118342488782484,
                                    0.7059285013327543,
                                    0.7000919181365116,
                                    0.6943219161261167,
                                    0.6886160830046718,
                                    0.6829721616449949,
                                    0.6773880362187735,
                                    0.6718617198970821,
                                    0.6663913439087501,
                                    0.6609751477766631,
                                    0.6556114705796973,
                                    0.6502987431108167,
                                    0.6450354808208223,
                                    0.6398202774530566,
                                    0.6346517992876236,
                                    0.6295287799248367,
                                    0.6244500155470265,
                                    0.6194143606058343,
                                    0.6144207238889139,
                                    0.6094680649257734,
                                    0.6045553906974678,
                                    0.5996817526191253,
                                    0.5948462437679874,
                                    0.590047996332826,
                                    0.5852861792633715,
                                    0.5805599961007909,
                                    0.5758686829723537,
                                    0.5712115067352532,
                                    0.5665877632561644,
                                    0.5619967758145243,
                                    0.557437893618766,
                                    0.5529104904258323,
                                    0.5484139632552658,
                                    0.5439477311900263,
                                    0.5395112342569521,
                                    0.5351039323804576,
                                    0.5307253044036621,
                                    0.5263748471716845,
                                    0.5220520746723218,
                                    0.5177565172297564,
                                    0.513487720747327,
                                    0.5092452459957479,
                                    0.5050286679434681,
                                    0.5008375751261487,
                                    0.4966715690524897,
                                    0.49253026364386854,
                                    0.48841328470545803,
                                    0.4843202694266833,
                                    0.48025086590904675,
                                    0.47620473271950586,
                                    0.4721815384677302,
                                    0.4681809614056936,
                                    0.46420268904817436,
                                    0.46024641781284287,
                                    0.45631185267871643,
                                    0.4523987068618485,
                                    0.44850670150720306,
                                    0.4446355653957394,
                                    0.440785034665804,
                                    0.43695485254798555,
                                    0.43314476911265226,
                                    0.4293545410294414,
                                    0.42558393133802197,
                                    0.4218327092294959,
                                    0.4181006498378482,
                                    0.4143875340408911,
                                    0.41069314827018816,
                                    0.40701728432947337,
                                    0.4033597392211145,
                                    0.3997203149801972,
                                    0.39609881851583245,
                                    0.3924950614593156,
                                    0.3889088600187887,
                                    0.3853400348400773,
                                    0.38178841087339366,
                                    0.3782538172456192,
                                    0.37473608713789114,
                                    0.3712350576682395,
                                    0.3677505697790326,
                                    0.36428246812900406,
                                    0.36083060098964803,
                                    0.3573948201457805,
                                    0.3539749808000768,
                                    0.3505709414814061,
                                    0.34718256395679364,
                                    0.3438097131468507,
                                    0.34045225704452187,
                                    0.33711006663700605,
                                    0.33378301583071845,
                                    0.3304709813791636,
                                    0.3271738428136014,
                                    0.3238914823763911,
                                    0.32062378495690536,
                                    0.3173706380299136,
                                    0.3141319315963372,
                                    0.3109075581262865,
                                    0.30769741250429206,
                                    0.30450139197665,
                                    0.30131939610080305,
                                    0.2981513266966855,
                                    0.2949970877999618,
                                    0.2918565856170952,
                                    0.2887297284821829,
                                    0.28561642681550176,
                                    0.2825165930837076,
                                    0.27943014176163794,
                                    0.2763569892956683,
                                    0.27329705406857707,
                                    0.27025025636587546,
                                    0.26721651834356147,
                                    0.2641957639972612,
                                    0.2611879191327212,
                                    0.25819291133761924,
                                    0.25521066995466196,
                                    0.2522411260559422,
                                    0.24928421241852852,
                                    0.24633986350126383,
                                    0.2434080154227503,
                                    0.2404886059405006,
                                    0.2375815744312381,
                                    0.23468686187233,
                                    0.23180441082433872,
                                    0.22893416541468034,
                                    0.22607607132238028,
                                    0.22323007576391748,
                                    0.220396127480152,
                                    0.21757417672433113,
                                    0.21476417525117358,
                                    0.21196607630703018,
                                    0.20917983462112508,
                                    0.2064054063978808,
                                    0.2036427493103349,
                                    0.2008918224946566,
                                    0.19815258654577514,
                                    0.1954250035141343,
                                    0.19270903690358918,
                                    0.19000465167046499,
                                    0.1873118142238003,
                                    0.18463049242679927,
                                    0.18196065559952251,
                                    0.17930227452284758,
                                    0.17665532144373486,
                                    0.17401977008183855,
                                    0.17139559563750575,
                                    0.1687827748012113,
                                    0.1661812857644819,
                                    0.16359110823236558,
                                    0.161012223437511,
                                    0.15844461415592428,
                                    0.1558882647244792,
                                    0.15334316106026286,
                                    0.15080929068184568,
                                    0.14828664273257455,
                                    0.14577520800599403,
                                    0.14327497897351346,
                                    0.1407859498144447,
                                    0.13830811644855073,
                                    0.13584147657125376,
                                    0.13338602969166916,
                                    0.13094177717364436,
                                    0.12850872227999957,
                                    0.1260868702201859,
                                    0.12367622820159657,
                                    0.1212768054847903,
                                    0.11888861344291006,
                                    0.11651166562561087,
                                    0.11414597782783849,
                                    0.11179156816383809,
                                    0.1094484571468118,
                                    0.1071166677746838,
                                    0.10479622562248707,
                                    0.10248715894193525,
                                    0.10018949876881002,
                                    0.09790327903886246,
                                    0.095628536713009,
                                    0.09336531191269101,
                                    0.09111364806637376,
                                    0.08887359206827589,
                                    0.08664519445055807,
                                    0.08442850957035347,
                                    0.0822235958132029,
                                    0.08003051581466307,
                                    0.07784933670209612,
                                    0.07568013035892718,
                                    0.07352297371398132,
                                    0.0713779490588904,
                                    0.06924514439700676,
                                    0.0671246538277885,
                                    0.0650165779712429,
                                    0.06292102443775814,
                                    0.06083810834953988,
                                    0.05876795292093374,
                                    0.0567106901062029,
                                    0.05466646132488892,
                                    0.05263541827679219,
                                    0.05061772386094778,
                                    0.04861355321586854,
                                    0.04662309490193038,
                                    0.044646552251294463,
                                    0.04268414491647446,
                                    0.04073611065594094,
                                    0.03880270740452615,
                                    0.036884215688567305,
                                    0.034980941461716125,
                                    0.03309321945857858,
                                    0.0312214171919203,
                                    0.02936593975813336,
                                    0.027527235669603113,
                                    0.02570580400854891,
                                    0.02390220330579588,
                                    0.02211706270730885,
                                    0.02035109623004451,
                                    0.018605121275724622,
                                    0.016880083152543142,
                                    0.01517708830793531,
                                    0.013497450601739867,
                                    0.011842757857907879,
                                    0.010214971439701459,
                                    0.008616582769398726,
                                    0.007050875471373222,
                                    0.0055224032992509916,
                                    0.0040379725933630236,
                                    0.0026090727461021593,
                                    0.001260285930498598};
/* numpy's ki_double. */
static const uint64_t layer_k[256] = {
    0xEF33D8025EF6A, 0x0000000000000, 0xC08BE98FBC6A8, 0xDA354FABD8142,
    0xE51F67EC1EEEA, 0xEB255E9D3F77E, 0xEEF4B817ECAB9, 0xF19470AFA44AA,
    0xF37ED61FFCB18, 0xF4F469561255C, 0xF61A5E41BA396, 0xF707A755396A4,
    0xF7CB2EC28449A, 0xF86F10C6357D3, 0xF8FA6578325DE, 0xF9724C74DD0DA,
    0xF9DA907DBF509, 0xFA360F581FA74, 0xFA86FDE5B4BF8, 0xFACF160D354DC,
    0xFB0FB6718B90F, 0xFB49F8D5374C6, 0xFB7EC2366FE77, 0xFBAECE9A1E50E,
    0xFBDAB9D040BED, 0xFC03060FF6C57, 0xFC2821037A248, 0xFC4A67AE25BD1,
    0xFC6A2977AEE31, 0xFC87AA92896A4, 0xFCA325E4BDE85, 0xFCBCCE902231A,
    0xFCD4D12F839C4, 0xFCEB54D8FEC99, 0xFD007BF1DC930, 0xFD1464DD6C4E6,
    0xFD272A8E2F450, 0xFD38E4FF0C91E, 0xFD49A9990B478, 0xFD598B8920F53,
    0xFD689C08E99EC, 0xFD76EA9C8E832, 0xFD848547B08E8, 0xFD9178BAD2C8C,
    0xFD9DD07A7ADD2, 0xFDA9970105E8C, 0xFDB4D5DC02E20, 0xFDBF95C5BFCD0,
    0xFDC9DEBB99A7D, 0xFDD3B8118729D, 0xFDDD288342F90, 0xFDE6364369F64,
    0xFDEEE708D514E, 0xFDF7401A6B42E, 0xFDFF46599ED40, 0xFE06FE4BC24F2,
    0xFE0E6C225A258, 0xFE1593C28B84C, 0xFE1C78CBC3F99, 0xFE231E9DB1CAA,
    0xFE29885DA1B91, 0xFE2FB8FB54186, 0xFE35B33558D4A, 0xFE3B799D0002A,
    0xFE410E99EAD7F, 0xFE46746D47734, 0xFE4BAD34C095C, 0xFE50BAED29524,
    0xFE559F74EBC78, 0xFE5A5C8E41212, 0xFE5EF3E138689, 0xFE6366FD91078,
    0xFE67B75C6D578, 0xFE6BE661E11AA, 0xFE6FF55E5F4F2, 0xFE73E5900A702,
    0xFE77B823E9E39, 0xFE7B6E37070A2, 0xFE7F08D774243, 0xFE8289053F08C,
    0xFE85EFB35173A, 0xFE893DC840864, 0xFE8C741F0CEBC, 0xFE8F9387D4EF6,
    0xFE929CC879B1D, 0xFE95909D388EA, 0xFE986FB939AA2, 0xFE9B3AC714866,
    0xFE9DF2694B6D5, 0xFEA0973ABE67C, 0xFEA329CF166A4, 0xFEA5AAB32952C,
    0xFEA81A6D5741A, 0xFEAA797DE1CF0, 0xFEACC85F3D920, 0xFEAF07865E63C,
    0xFEB13762FEC13, 0xFEB3585FE2A4A, 0xFEB56AE3162B4, 0xFEB76F4E284FA,
    0xFEB965FE62014, 0xFEBB4F4CF9D7C, 0xFEBD2B8F449D0, 0xFEBEFB16E2E3E,
    0xFEC0BE31EBDE8, 0xFEC2752B15A15, 0xFEC42049DAFD3, 0xFEC5BFD29F196,
    0xFEC75406CEEF4, 0xFEC8DD2500CB4, 0xFECA5B6911F12, 0xFECBCF0C427FE,
    0xFECD38454FB15, 0xFECE97488C8B3, 0xFECFEC47F91B7, 0xFED1377358528,
    0xFED278F844903, 0xFED3B10242F4C, 0xFED4DFBAD586E, 0xFED605498C3DD,
    0xFED721D414FE8, 0xFED8357E4A982, 0xFED9406A42CC8, 0xFEDA42B85B704,
    0xFEDB3C8746AB4, 0xFEDC2DF416652, 0xFEDD171A46E52, 0xFEDDF813C8AD3,
    0xFEDED0F909980, 0xFEDFA1E0FD414, 0xFEE06AE124BC4, 0xFEE12C0D95A06,
    0xFEE1E579006E0, 0xFEE29734B6524, 0xFEE34150AE4BC, 0xFEE3E3DB89B3C,
    0xFEE47EE2982F4, 0xFEE51271DB086, 0xFEE59E9407F41, 0xFEE623528B42E,
    0xFEE6A0B5897F1, 0xFEE716C3E077A, 0xFEE7858327B82, 0xFEE7ECF7B06BA,
    0xFEE84D2484AB2, 0xFEE8A60B66343, 0xFEE8F7ACCC851, 0xFEE94207E25DA,
    0xFEE9851A829EA, 0xFEE9C0E13485C, 0xFEE9F557273F4, 0xFEEA22762CCAE,
    0xFEEA4836B42AC, 0xFEEA668FC2D71, 0xFEEA7D76ED6FA, 0xFEEA8CE04FA0A,
    0xFEEA94BE8333B, 0xFEEA950296410, 0xFEEA8D9C0075E, 0xFEEA7E7897654,
    0xFEEA678481D24, 0xFEEA48AA29E83, 0xFEEA21D22E4DA, 0xFEE9F2E352024,
    0xFEE9BBC26AF2E, 0xFEE97C524F2E4, 0xFEE93473C0A3A, 0xFEE8E40557516,
    0xFEE88AE369C7A, 0xFEE828E7F3DFD, 0xFEE7BDEA7B888, 0xFEE749BFF37FF,
    0xFEE6CC3A9BD5E, 0xFEE64529E007E, 0xFEE5B45A32888, 0xFEE51994E57B6,
    0xFEE474A0006CF, 0xFEE3C53E12C50, 0xFEE30B2E02AD8, 0xFEE2462AD8205,
    0xFEE175EB83C5A, 0xFEE09A22A1447, 0xFEDFB27E349CC, 0xFEDEBEA76216C,
    0xFEDDBE422047E, 0xFEDCB0ECE39D3, 0xFEDB964042CF4, 0xFEDA6DCE938C9,
    0xFED937237E98D, 0xFED7F1C38A836, 0xFED69D2B9C02B, 0xFED538D06AE00,
    0xFED3C41DEA422, 0xFED23E76A2FD8, 0xFED0A732FE644, 0xFECEFDA07FE34,
    0xFECD4100EB7B8, 0xFECB708956EB4, 0xFEC98B61230C1, 0xFEC790A0DA978,
    0xFEC57F50F31FE, 0xFEC356686C962, 0xFEC114CB4B335, 0xFEBEB948E6FD0,
    0xFEBC429A0B692, 0xFEB9AF5EE0CDC, 0xFEB6FE1C98542, 0xFEB42D3AD1F9E,
    0xFEB13B00B2D4B, 0xFEAE2591A02E9, 0xFEAAEAE992257, 0xFEA788D8EE326,
    0xFEA3FCFFD73E5, 0xFEA044C8DD9F6, 0xFE9C5D62F563B, 0xFE9843BA947A4,
    0xFE93F471D4728, 0xFE8F6BD76C5D6, 0xFE8AA5DC4E8E6, 0xFE859E07AB1EA,
    0xFE804F690A940, 0xFE7AB488233C0, 0xFE74C751F6AA5, 0xFE6E8102AA202,
    0xFE67DA0B6ABD8, 0xFE60C9F38307E, 0xFE5947338F742, 0xFE51470977280,
    0xFE48BD436F458, 0xFE3F9BFFD1E37, 0xFE35D35EEB19C, 0xFE2B5122FE4FE,
    0xFE20003995557, 0xFE13C82788314, 0xFE068C4EE67B0, 0xFDF82B02B71AA,
    0xFDE87C57EFEAA, 0xFDD7509C63BFD, 0xFDC46E529BF13, 0xFDAF8F82E0282,
    0xFD985E1B2BA75, 0xFD7E6EF48CF04, 0xFD613ADBD650B, 0xFD40149E2F012,
    0xFD1A1A7B4C7AC, 0xFCEE204761F9E, 0xFCBA8D85E11B2, 0xFC7D26ECD2D22,
    0xFC32B2F1E22ED, 0xFBD6581C0B83A, 0xFB606C4005434, 0xFAC40582A2874,
    0xF9E971E014598, 0xF89FA48A41DFC, 0xF66C5F7F0302C, 0xF1A5A4B331C4A};

/* Beyond R, Marsaglia's tail method: with exponentials xx of rate R and yy of
 * rate 1, accept R + xx when 2 yy > xx^2. An exponential is -log1p(-u) =
 * -log(1 - u), finite at u = 0 where -log(u) is not. numpy takes the sign
 * from bit 8 of the 52-bit draw that picked layer 0. */
static double tail(tg_pcg64 *g, uint64_t rabs)
{
    for (;;) {
        double xx = -ZIGGURAT_INV_R * log1p(-next_double(g));
        double yy = -log1p(-next_double(g));
        if (yy + yy > xx * xx)
            return (rabs >> 8) & 1 ? -(ZIGGURAT_R + xx) : ZIGGURAT_R + xx;
    }
}

/* One draw of 64 bits: bits 0-7 pick the layer idx, bit 8 the sign, bits
 * 9-60 a 52-bit integer rabs, and x = rabs * x_idx / 2^52. A point with
 * rabs < ki[idx] lies in the part of the layer under the curve: accept
 * (99.3% of draws). Otherwise layer 0 goes to the tail, and any other layer
 * accepts x when a uniform height in [f(x_idx), f(x_{idx-1})) falls below
 * f(x); a rejected draw starts over with 64 fresh bits. */
double tg_pcg64_normal(tg_pcg64 *g)
{
    if (!g) {
        tg__error("pcg64_normal: generator is NULL");
        return NAN;
    }
    for (;;) {
        uint64_t bits = next64(g);
        int idx = (int)(bits & 0xff);
        bool negative = (bits >> 8) & 1;
        uint64_t rabs = (bits >> 9) & 0x000fffffffffffffULL;
        double x = (double)rabs * (layer_x[idx] * 0x1p-52);
        if (negative)
            x = -x;
        if (rabs < layer_k[idx])
            return x;
        if (idx == 0)
            return tail(g, rabs);
        double height =
            (layer_f[idx - 1] - layer_f[idx]) * next_double(g) + layer_f[idx];
        if (height < exp(-0.5 * x * x))
            return x;
    }
}

/* Generator.standard_normal(shape) fills float64 in C order with the draws
 * above. numpy's float32 standard_normal runs a separate float ziggurat; we
 * give float32 tensors the same float64 draws, rounded, as the legacy
 * tg_randn does, so one seed gives one stream whatever the dtype. */
tg_tensor *tg_pcg64_randn(tg_pcg64 *g, tg_dtype dt, int ndim,
                          const int64_t *shape)
{
    if (!g) {
        tg__error("pcg64_randn: generator is NULL");
        return NULL;
    }
    if (dt != TG_FLOAT32 && dt != TG_FLOAT64) {
        tg__error("pcg64_randn: dtype must be float32 or float64, got %s",
                  tg_dtype_name(dt));
        return NULL;
    }
    tg_tensor *t = tg__new("pcg64_randn", dt, ndim, shape, false);
    if (!t)
        return NULL;
    int64_t n = tg_numel(t);
    for (int64_t i = 0; i < n; i++)
        tg__store(dt, t->storage->data, i, tg_pcg64_normal(g));
    return t;
}
